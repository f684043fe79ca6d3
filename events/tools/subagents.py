"""task and delegate: the payloads of the tools that hand work to sub-agents
(OpenHands' TaskTool and DelegateTool shapes)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from events.tools.base import Action, Observation


class TaskAction(Action):
    kind: Literal["TaskAction"] = "TaskAction"
    description: str | None = Field(
        default=None, max_length=200, description="A short (3-5 word) description of the task."
    )
    prompt: str = Field(
        min_length=1, max_length=100_000, description="The task for the agent to perform."
    )
    subagent_type: str = Field(
        default="general-purpose",
        max_length=100,
        description="The type of specialized agent to use for this task.",
    )
    resume: str | None = Field(
        default=None, max_length=100, description="Task ID of the task to resume from."
    )
    max_turns: SkipJsonSchema[int | None] = Field(
        default=None, ge=1, description="Ignored (kept for the public shape)."
    )


class TaskObservation(Observation):
    kind: Literal["TaskObservation"] = "TaskObservation"
    task_id: str = Field(description="The unique identifier of the task.")
    subagent: str = Field(description="The subagent of the task.")
    status: str = Field(description="The status of the task.")


class DelegateAction(Action):
    kind: Literal["DelegateAction"] = "DelegateAction"
    command: Literal["spawn", "delegate"] = Field(
        description="The commands to run. Allowed options are: `spawn`, `delegate`."
    )
    ids: list[str] | None = Field(
        default=None,
        max_length=20,
        description="Required parameter of `spawn` command. "
        "List of identifiers to initialize sub-agents with.",
    )
    agent_types: list[str] | None = Field(
        default=None,
        max_length=20,
        description="Optional parameter of `spawn` command. List of agent types for each ID "
        "(e.g., ['code-explorer', 'bash-runner']). If omitted or blank for an ID, "
        "the default general-purpose agent is used.",
    )
    tasks: dict[str, str] | None = Field(
        default=None,
        max_length=20,
        description="Required parameter of `delegate` command. "
        "Dictionary mapping sub-agent identifiers to task descriptions.",
    )


class DelegateObservation(Observation):
    kind: Literal["DelegateObservation"] = "DelegateObservation"
    command: Literal["spawn", "delegate"] = Field(description="The command that was executed")


__all__ = [
    "DelegateAction",
    "DelegateObservation",
    "TaskAction",
    "TaskObservation",
]
