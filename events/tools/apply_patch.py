"""apply_patch: the patch the model sends and what it changed (OpenHands' shapes)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from events.content import Strict
from events.tools.base import Action, Observation


class ApplyPatchAction(Action):
    kind: Literal["ApplyPatchAction"] = "ApplyPatchAction"
    patch: str = Field(
        description=(
            "Patch content following the '*** Begin Patch' ... '*** End Patch' format "
            "as described in OpenAI GPT-5.1 prompting guide."
        )
    )


class FileChange(Strict):
    """One file of an applied patch (OpenHands' apply_patch FileChange)."""

    type: Literal["add", "delete", "update"]
    #: The text before and after; None when not carried (too big for the event log).
    old_content: str | None = None
    new_content: str | None = None
    move_path: str | None = None


class Commit(Strict):
    """What an applied patch changed, by the path the patch named."""

    changes: dict[str, FileChange] = Field(default_factory=dict)


class ApplyPatchObservation(Observation):
    kind: Literal["ApplyPatchObservation"] = "ApplyPatchObservation"
    #: A summary of the changes, or the error.
    message: str = ""
    #: How loosely the hunks matched: 0 exact, 1 per hunk matched ignoring trailing spaces,
    #: 100 per hunk matched ignoring spaces at both ends.
    fuzz: int = 0
    commit: Commit | None = None


__all__ = [
    "ApplyPatchAction",
    "ApplyPatchObservation",
    "Commit",
    "FileChange",
]
