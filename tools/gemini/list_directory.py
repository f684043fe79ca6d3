"""list_directory: the entries of a workspace directory with sizes and times (Gemini's)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from events.tools.gemini import FileEntry, ListDirectoryAction, ListDirectoryObservation
from tools import files
from tools.base import TextContent, single
from tools.gemini.common import WorkspaceFileTool, error_content

#: Entries returned by one call; the rest are counted.
MAX_ENTRIES = 500
#: Levels a recursive listing goes down (1 is the directory itself).
RECURSIVE_DEPTH = 2


class ListDirectoryTool(WorkspaceFileTool):
    name = "list_directory"
    description = (
        "Lists a directory of the workspace: each entry's name, path, whether it is a "
        "directory, its size in bytes and when it was last modified. Hidden entries are "
        "included. `recursive` also lists subdirectories, two levels deep (symlinked "
        f"directories are shown, not entered). At most {MAX_ENTRIES} entries are returned, "
        "with the total counted. `dir_path` defaults to the working directory; paths are "
        "relative to it, or absolute inside it."
    )
    action_type = ListDirectoryAction
    observation_type = ListDirectoryObservation
    acts = False
    read_only = True

    async def run(self, action: ListDirectoryAction) -> ListDirectoryObservation:
        return await self.guarded(
            lambda: self._list(action),
            lambda why: ListDirectoryObservation(dir_path=action.dir_path, **error_content(why)),
        )

    def _list(self, action: ListDirectoryAction) -> ListDirectoryObservation:
        path = self.path(action.dir_path)
        if not path.exists():
            raise files.Refusal(f"The directory {path} does not exist.")
        if not path.is_dir():
            raise files.Refusal(f"{path} is not a directory; use read_file to read a file.")
        entries: list[FileEntry] = []
        total = _walk(path, RECURSIVE_DEPTH if action.recursive else 1, entries)
        lines = [_line(path, e) for e in entries]
        text = f"{path} ({total} entr{'y' if total == 1 else 'ies'}):\n" + (
            "\n".join(lines) if lines else "(empty directory)"
        )
        if total > len(entries):
            text += (
                f"\n[{total - len(entries)} more entries not shown: list a "
                "subdirectory, or use glob]"
            )
        return ListDirectoryObservation(
            dir_path=str(path),
            entries=entries,
            total_count=total,
            is_truncated=total > len(entries),
            content=[TextContent(text=files.clip(text, how="List a subdirectory."))],
        )


def _walk(directory: Path, depth: int, out: list[FileEntry]) -> int:
    """Add the entries under directory (directories first, then by name) to `out` up to
    MAX_ENTRIES; the number there were in all."""
    try:
        with os.scandir(directory) as it:
            children = sorted(it, key=lambda e: (not e.is_dir(follow_symlinks=False), e.name))
    except OSError:
        return 0
    total = 0
    for child in children:
        total += 1
        is_dir = child.is_dir(follow_symlinks=False)
        if len(out) < MAX_ENTRIES:
            try:
                info = child.stat(follow_symlinks=False)
            except OSError:
                continue
            out.append(
                FileEntry(
                    name=child.name,
                    path=child.path,
                    is_directory=is_dir,
                    size=0 if is_dir else info.st_size,
                    modified_time=datetime.fromtimestamp(info.st_mtime, UTC),
                )
            )
        if is_dir and depth > 1:
            total += _walk(Path(child.path), depth - 1, out)
    return total


def _line(base: Path, entry: FileEntry) -> str:
    rel = os.path.relpath(entry.path, base)
    when = entry.modified_time.strftime("%Y-%m-%d %H:%M")
    if entry.is_directory:
        return f"[DIR]  {rel}/  {when}"
    return f"       {rel}  {entry.size} bytes  {when}"


TOOL_SET = single(ListDirectoryTool)

__all__ = [
    "MAX_ENTRIES",
    "TOOL_SET",
    "FileEntry",
    "ListDirectoryAction",
    "ListDirectoryObservation",
    "ListDirectoryTool",
]
