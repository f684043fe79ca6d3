"""glob and grep: their Actions and Observations (OpenHands' GlobAction and GrepAction shapes)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from events.tools.base import Action, Observation


class GlobAction(Action):
    kind: Literal["GlobAction"] = "GlobAction"
    pattern: str = Field(
        description='The glob pattern to match files (e.g., "**/*.js", "src/**/*.ts")'
    )
    path: str | None = Field(
        default=None,
        description=(
            "The directory (absolute path) to search in. Defaults to the current working directory."
        ),
    )


class GlobObservation(Observation):
    kind: Literal["GlobObservation"] = "GlobObservation"
    files: list[str] = Field(description="List of matching file paths sorted by modification time")
    pattern: str = Field(description="The glob pattern that was used")
    search_path: str = Field(description="The directory that was searched")
    truncated: bool = Field(
        default=False, description="Whether results were truncated to 100 files"
    )


class GrepAction(Action):
    kind: Literal["GrepAction"] = "GrepAction"
    pattern: str = Field(description="The regex pattern to search for in file contents")
    path: str | None = Field(
        default=None,
        description=(
            "The directory (absolute path) to search in. Defaults to the current working directory."
        ),
    )
    include: str | None = Field(
        default=None,
        description=(
            'Optional file pattern to filter which files to search (e.g., "*.js", "*.{ts,tsx}")'
        ),
    )


class GrepObservation(Observation):
    kind: Literal["GrepObservation"] = "GrepObservation"
    matches: list[str] = Field(description="List of file paths containing the pattern")
    pattern: str = Field(description="The regex pattern that was used")
    search_path: str = Field(description="The directory that was searched")
    include_pattern: str | None = Field(
        default=None, description="The file pattern filter that was used"
    )
    truncated: bool = Field(
        default=False, description="Whether results were truncated to 100 files"
    )


__all__ = [
    "GlobAction",
    "GlobObservation",
    "GrepAction",
    "GrepObservation",
]
