"""planning_file_editor: file_editor for planning agents, which read the whole workspace but
write only their plan file (PLAN.md unless the tool's params name another).

The plan is the planning agent's only output, so everything else stays as the user left it
however the model is prompted. Shapes follow OpenHands' planning file editor: the same fields
as file_editor under their own kinds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from events.tools.file_editor import PlanningFileEditorAction, PlanningFileEditorObservation
from tools import files
from tools.base import ToolContext, params_as, single
from tools.file_editor import FileEditorAction, FileEditorObservation, FileEditorTool
from tools.files import Refusal

DEFAULT_PLAN_PATH = "PLAN.md"


class PlanningFileEditorParams(BaseModel):
    """The `params` of the planning_file_editor entry of `agent.tools`."""

    model_config = ConfigDict(extra="forbid")

    plan_path: str = Field(
        default=DEFAULT_PLAN_PATH,
        description=(
            "The one file the editor may write: relative to the working directory, or "
            "absolute inside it."
        ),
        # What the validator checks that a schema can say (no empty name, no NUL, no
        # directory); its own message stays the one a client reads.
        json_schema_extra={"pattern": r"^[^\x00]*([^\x00\s/]|[^\x00\s][^\x00]*[^\x00/])$"},
    )

    @field_validator("plan_path")
    @classmethod
    def _a_file_path(cls, value: str) -> str:
        if not value.strip() or "\0" in value or value.endswith("/"):
            raise ValueError("plan_path must name a file, e.g. PLAN.md")
        if not os.path.isabs(value) and ".." in Path(value).parts:
            raise ValueError("plan_path must stay inside the working directory (no '..')")
        return value


class PlanningFileEditorTool(FileEditorTool):
    name = "planning_file_editor"
    description = FileEditorTool.description + (
        "\nPLANNING RESTRICTION: you can view any file or directory in the workspace, but "
        "create, str_replace, insert and undo_edit work only on the plan file (PLAN.md in the "
        "working directory unless configured otherwise). Write your plan there."
    )
    # Subclasses of file_editor's kinds, so file_editor's code runs them unchanged.
    action_type = PlanningFileEditorAction  # type: ignore[assignment]
    observation_type = PlanningFileEditorObservation  # type: ignore[assignment]

    def __init__(self, ctx: ToolContext, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(ctx, params)
        self.plan_path = params_as(PlanningFileEditorParams, self.params).plan_path

    def _plan(self) -> Path:
        named = os.path.join(self.ctx.working_dir, self.plan_path)
        if os.path.islink(named):  # else the one writable file could be any file it points to
            raise Refusal(
                f"The plan file {named} is a symbolic link; planning_file_editor "
                "only writes a regular plan file."
            )
        return files.confined(self.ctx.working_dir, self.plan_path)

    def _absolute(self, raw: str) -> Path:
        """file_editor's absolute path, which must also be inside the workspace."""
        return files.confined(self.ctx.working_dir, str(super()._absolute(raw)))

    def _run_locked(self, action: FileEditorAction) -> FileEditorObservation:
        if action.command != "view":
            plan = self._plan()
            if self._absolute(action.path) != plan:
                raise Refusal(
                    f"{action.command} refused: planning_file_editor may only change the plan "
                    f"file {plan}. View any file to read it; write your plan to {plan}."
                )
        return super()._run_locked(action)

    async def run(self, action: FileEditorAction) -> PlanningFileEditorObservation:
        observation = await super().run(action)
        return PlanningFileEditorObservation.model_validate(
            observation.model_dump(exclude={"kind"})
        )


TOOL_SET = single(PlanningFileEditorTool, PlanningFileEditorParams)

__all__ = [
    "DEFAULT_PLAN_PATH",
    "TOOL_SET",
    "PlanningFileEditorAction",
    "PlanningFileEditorObservation",
    "PlanningFileEditorParams",
    "PlanningFileEditorTool",
]
