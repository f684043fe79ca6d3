"""workflow: the public WorkflowAction's fields and what the run reports."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from events.tools.base import Action, Observation


class WorkflowAction(Action):
    kind: Literal["WorkflowAction"] = "WorkflowAction"
    name: str = Field(
        min_length=1,
        max_length=100,
        description="The workflow's name: without `script`, the workflow defined in "
        ".agents/workflows/<name>.yaml (.yml, .json) of the workspace.",
    )
    script: str = Field(
        default="",
        max_length=200_000,
        description="Optional: the workflow itself, in the same YAML or JSON format as the "
        "files, instead of a file.",
    )
    max_concurrency: int = Field(
        default=8,
        ge=1,
        le=64,
        description="How many steps of a parallel group run at once at most.",
    )


class WorkflowObservation(Observation):
    kind: Literal["WorkflowObservation"] = "WorkflowObservation"
    name: str = Field(description="The workflow name that was executed.")
    status: Literal["completed", "error"] = Field(description="The workflow execution status.")


__all__ = [
    "WorkflowAction",
    "WorkflowObservation",
]
