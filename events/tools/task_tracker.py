"""task_tracker: the plan as a checklist the model sends and reads (OpenHands' shapes)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from events.content import Strict
from events.tools.base import Action, Observation

TaskStatus = Literal["todo", "in_progress", "done"]


class TaskItem(Strict):
    """One step of the plan."""

    title: str = Field(description="A short, one-line step, e.g. 'Add tests for the parser'.")
    notes: str = Field(default="", description="Details, decisions or findings for this step.")
    status: TaskStatus = Field(
        default="todo", description="todo, in_progress (what you are doing now) or done."
    )


class TaskTrackerAction(Action):
    kind: Literal["TaskTrackerAction"] = "TaskTrackerAction"
    command: Literal["view", "plan"] = Field(
        default="view",
        description="view: show the current list. plan: replace the whole list with task_list.",
    )
    task_list: list[TaskItem] = Field(
        default_factory=list,
        description=(
            "For plan: the complete new list in order, every task and not only the changed "
            "ones (tasks left out are dropped)."
        ),
    )


class TaskTrackerObservation(Observation):
    kind: Literal["TaskTrackerObservation"] = "TaskTrackerObservation"
    command: Literal["view", "plan"]
    task_list: list[TaskItem] = Field(default_factory=list)


__all__ = [
    "TaskItem",
    "TaskStatus",
    "TaskTrackerAction",
    "TaskTrackerObservation",
]
