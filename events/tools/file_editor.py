"""file_editor and planning_file_editor: their Action and Observation, shaped like
OpenHands' file editor (the planning kinds have the same fields under their own names)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from events.tools.base import Action, Observation

Command = Literal["view", "create", "str_replace", "insert", "undo_edit"]


class FileEditorAction(Action):
    kind: Literal["FileEditorAction"] = "FileEditorAction"
    command: Command = Field(
        description="The command to run: view, create, str_replace, insert or undo_edit."
    )
    path: str = Field(
        description="Absolute path of the file or directory, e.g. /workspace/project/app.py."
    )
    file_text: str | None = Field(
        default=None, description="Required for create: the full content of the new file."
    )
    old_str: str | None = Field(
        default=None,
        description=(
            "Required for str_replace: the exact text to replace. It must occur exactly once "
            "in the file, whitespace and indentation included."
        ),
    )
    new_str: str | None = Field(
        default=None,
        description=(
            "For str_replace: the replacement (omit or leave empty to delete old_str). "
            "Required for insert: the line(s) to insert."
        ),
    )
    insert_line: int | None = Field(
        default=None,
        ge=0,
        description="Required for insert: new_str goes after this line (0 inserts at the top).",
    )
    view_range: list[int] | None = Field(
        default=None,
        description=(
            "Optional for view of a file: [start, end], 1-based and inclusive; "
            "end -1 means to the end of the file."
        ),
    )


class FileEditorObservation(Observation):
    kind: Literal["FileEditorObservation"] = "FileEditorObservation"
    command: Command
    path: str | None = None
    #: False only when create made a new file.
    prev_exist: bool = True
    #: The file before and after an edit, for clients that show a diff; None when either side
    #: is over tools.files.MAX_SNAPSHOT_BYTES, so one edit of a big file cannot bloat the event
    #: log.
    old_content: str | None = None
    new_content: str | None = None


class PlanningFileEditorAction(FileEditorAction):
    kind: Literal["PlanningFileEditorAction"] = "PlanningFileEditorAction"  # type: ignore[assignment]


class PlanningFileEditorObservation(FileEditorObservation):
    kind: Literal["PlanningFileEditorObservation"] = "PlanningFileEditorObservation"  # type: ignore[assignment]


__all__ = [
    "Command",
    "FileEditorAction",
    "FileEditorObservation",
    "PlanningFileEditorAction",
    "PlanningFileEditorObservation",
]
