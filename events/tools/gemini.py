"""The Gemini-style file tools' payloads: list_directory, read_file, write_file and edit."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from events.content import Strict
from events.tools.base import Action, Observation


class FileEntry(Strict):
    """Information about a file or directory."""

    name: str = Field(description="Name of the file or directory")
    path: str = Field(description="Absolute path to the file or directory")
    is_directory: bool = Field(description="Whether this entry is a directory")
    size: int = Field(description="Size of the file in bytes (0 for directories)")
    modified_time: datetime = Field(description="Last modified timestamp")


class ListDirectoryAction(Action):
    kind: Literal["ListDirectoryAction"] = "ListDirectoryAction"
    dir_path: str = Field(
        default=".",
        description="The path to the directory to list. Defaults to current directory.",
    )
    recursive: bool = Field(
        default=False,
        description="Whether to list subdirectories recursively (up to 2 levels).",
    )


class ListDirectoryObservation(Observation):
    kind: Literal["ListDirectoryObservation"] = "ListDirectoryObservation"
    dir_path: str | None = Field(default=None, description="The directory path that was listed.")
    entries: list[FileEntry] = Field(
        default_factory=list, description="List of files and directories found."
    )
    total_count: int = Field(default=0, description="Total number of entries found.")
    is_truncated: bool = Field(
        default=False,
        description="Whether the listing was truncated due to too many entries.",
    )


class ReadFileAction(Action):
    kind: Literal["ReadFileAction"] = "ReadFileAction"
    file_path: str = Field(description="The path to the file to read.")
    offset: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Optional: The 0-based line number to start reading from. "
            "Use for paginating through large files."
        ),
    )
    limit: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Optional: Maximum number of lines to read. "
            "Use with 'offset' to paginate through large files."
        ),
    )


class ReadFileObservation(Observation):
    kind: Literal["ReadFileObservation"] = "ReadFileObservation"
    file_path: str = Field(description="The file path that was read.")
    file_content: str = Field(default="", description="The content read from the file.")
    is_truncated: bool = Field(
        default=False, description="Whether the content was truncated due to size limits."
    )
    lines_shown: tuple[int, int] | None = Field(
        default=None,
        description="If truncated, the range of lines shown (start, end) - 1-indexed.",
    )
    total_lines: int | None = Field(default=None, description="Total number of lines in the file.")


class WriteFileAction(Action):
    kind: Literal["WriteFileAction"] = "WriteFileAction"
    file_path: str = Field(description="The path to the file to write to.")
    content: str = Field(description="The content to write to the file.")


class WriteFileObservation(Observation):
    kind: Literal["WriteFileObservation"] = "WriteFileObservation"
    file_path: str | None = Field(default=None, description="The file path that was written.")
    is_new_file: bool = Field(default=False, description="Whether a new file was created.")
    old_content: str | None = Field(
        default=None, description="The previous content of the file (if it existed)."
    )
    new_content: str | None = Field(
        default=None, description="The new content written to the file."
    )


class EditAction(Action):
    kind: Literal["EditAction"] = "EditAction"
    file_path: str = Field(description="The path to the file to modify.")
    old_string: str = Field(
        description=(
            "The text to replace. To create a new file, use an empty string. "
            "Must match the exact text in the file including whitespace."
        )
    )
    new_string: str = Field(description="The text to replace it with.")
    expected_replacements: int = Field(
        default=1,
        ge=0,
        description=(
            "Number of replacements expected. Defaults to 1. "
            "Use when you want to replace multiple occurrences. "
            "The edit will fail if the actual count doesn't match."
        ),
    )


class EditObservation(Observation):
    kind: Literal["EditObservation"] = "EditObservation"
    file_path: str | None = Field(default=None, description="The file path that was edited.")
    is_new_file: bool = Field(default=False, description="Whether a new file was created.")
    replacements_made: int = Field(default=0, description="Number of replacements actually made.")
    old_content: str | None = Field(default=None, description="The content before the edit.")
    new_content: str | None = Field(default=None, description="The content after the edit.")


__all__ = [
    "EditAction",
    "EditObservation",
    "FileEntry",
    "ListDirectoryAction",
    "ListDirectoryObservation",
    "ReadFileAction",
    "ReadFileObservation",
    "WriteFileAction",
    "WriteFileObservation",
]
