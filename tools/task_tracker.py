"""task_tracker: the agent's plan as a checklist that lasts as long as its conversation.

A long task goes better when the model writes its plan down and ticks steps off. The list is
a JSON file in the conversation's state directory, replaced atomically, so it survives a
server restart and a new tool instance picks it up. Shapes follow OpenHands' task tracker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from core.files import write_atomic
from events.content import Strict
from events.tools.task_tracker import TaskItem, TaskTrackerAction, TaskTrackerObservation
from tools.base import TextContent, Tool, ToolError, run_in_thread, single

#: Bounds that keep the list (and every observation that repeats it) small.
MAX_TASKS = 200
MAX_TITLE_CHARS = 200
MAX_NOTES_CHARS = 2_000
#: The list's file in ctx.state_dir.
STORE_NAME = "task_list.json"


class _StoredList(Strict):
    """The file's shape, versioned so a later format can still read old conversations."""

    version: Literal[1] = 1
    task_list: list[TaskItem] = Field(default_factory=list)


class TaskTrackerTool(Tool):
    name = "task_tracker"
    description = (
        "Keeps your plan for this conversation as a task list.\n"
        "* plan: replaces the whole list with task_list. Send every task each time (tasks left "
        "out are dropped), with its status: todo, in_progress or done.\n"
        "* view: shows the current list.\n"
        "Use it for work of several steps: plan first, mark one task in_progress while you "
        "work on it, mark it done as soon as it is finished, and add tasks you discover. "
        f"Limits: {MAX_TASKS} tasks, titles of {MAX_TITLE_CHARS} characters on one line, "
        f"notes of {MAX_NOTES_CHARS} characters."
    )
    action_type = TaskTrackerAction
    observation_type = TaskTrackerObservation
    # Only the conversation's own list changes: nothing in the world to assess for risk.
    acts = False
    read_only = False

    @property
    def _store(self) -> Path:
        return self.ctx.state_dir / STORE_NAME

    async def run(self, action: TaskTrackerAction) -> TaskTrackerObservation:
        if action.command == "view":
            tasks: list[TaskItem] = await run_in_thread(_load, self._store)
            text = render_markdown(tasks)
            if not tasks:
                text += " Use the plan command to write one."
            return _observe("view", tasks, text)
        problems = _problems(action.task_list)
        if problems:
            text = "The task list was not changed:\n" + "\n".join(f"- {p}" for p in problems)
            return _observe("plan", [], text, is_error=True)
        try:
            await run_in_thread(_save, self._store, action.task_list)
        except OSError as e:
            raise ToolError(f"Could not save the task list: {e.strerror or e}") from e
        count = len(action.task_list)
        text = f"Task list updated ({count} task{'' if count == 1 else 's'}).\n\n"
        return _observe("plan", action.task_list, text + render_markdown(action.task_list))


def render_markdown(tasks: list[TaskItem]) -> str:
    """The list as a markdown checklist: numbered so the model can refer to steps, the task
    in progress marked, notes indented under their task."""
    if not tasks:
        return "The task list is empty."
    done = sum(t.status == "done" for t in tasks)
    active = sum(t.status == "in_progress" for t in tasks)
    head = f"# Task list: {done} of {len(tasks)} done"
    lines = [head + (f", {active} in progress" if active else "")]
    lines.append("")
    for number, task in enumerate(tasks, 1):
        mark = "[x]" if task.status == "done" else "[ ]"
        state = " (in progress)" if task.status == "in_progress" else ""
        lines.append(f"- {mark} {number}. {task.title}{state}")
        lines.extend(f"  {note}".rstrip() for note in task.notes.splitlines())
    return "\n".join(lines)


def _problems(tasks: list[TaskItem]) -> list[str]:
    """What is wrong with a plan, in words the model can act on; empty when it is fine."""
    problems: list[str] = []
    if len(tasks) > MAX_TASKS:
        problems.append(
            f"The plan has {len(tasks)} tasks; the limit is {MAX_TASKS}. Merge small steps."
        )
    for number, task in enumerate(tasks, 1):
        if not task.title.strip():
            problems.append(f"Task {number} has an empty title.")
        elif len(task.title) > MAX_TITLE_CHARS:
            problems.append(
                f"Task {number}'s title is {len(task.title)} characters; the limit is "
                f"{MAX_TITLE_CHARS}. Move the details into notes."
            )
        elif "\n" in task.title:
            problems.append(f"Task {number}'s title spans lines; keep it to one line.")
        if len(task.notes) > MAX_NOTES_CHARS:
            problems.append(
                f"Task {number}'s notes are {len(task.notes)} characters; the limit is "
                f"{MAX_NOTES_CHARS}."
            )
    return problems[:10]


def _load(path: Path) -> list[TaskItem]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    try:
        return _StoredList.model_validate_json(data).task_list
    except ValidationError as e:
        # Not the model's doing, but a new plan overwrites the file and recovers.
        raise ToolError(
            f"The stored task list ({path}) is unreadable: {e.error_count()} errors. "
            "Send a new plan to replace it."
        ) from e


def _save(path: Path, tasks: list[TaskItem]) -> None:
    """Write the list whole: after a crash the file holds the old list or the new one."""
    write_atomic(path, _StoredList(task_list=tasks).model_dump_json(indent=1).encode(), 0o644)


def _observe(
    command: Literal["view", "plan"], tasks: list[TaskItem], text: str, is_error: bool = False
) -> TaskTrackerObservation:
    return TaskTrackerObservation(
        command=command,
        task_list=tasks,
        is_error=is_error,
        content=[TextContent(text=text)],
    )


TOOL_SET = single(TaskTrackerTool)

__all__ = [
    "TOOL_SET",
    "TaskItem",
    "TaskTrackerAction",
    "TaskTrackerObservation",
    "TaskTrackerTool",
    "render_markdown",
]
