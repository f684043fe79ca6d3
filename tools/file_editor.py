"""file_editor: view, create and edit UTF-8 text files by exact string replacement.

Edits are verbatim (no fuzzy matching), so the model always knows exactly what changed, and
each edit keeps the previous version in memory so `undo_edit` can step back. The Action and
Observation (`events.tools.file_editor`) are shaped like OpenHands' file editor so its clients
read our events. What a view shows (numbered lines, ranges, listings) is in `tools.file_view`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from events.tools.file_editor import FileEditorAction, FileEditorObservation
from tools import files
from tools.base import (
    TextContent,
    Tool,
    ToolContext,
    ToolError,
    run_in_thread,
    single,
)
from tools.file_view import (
    find_all,
    line_of,
    list_dir,
    numbered,
    numbered_stream,
    parse_range,
    split_lines,
    view_text,
)
from tools.files import (
    MAX_FILE_BYTES,
    Refusal,
    check_size,
    from_lf,
    megabytes,
    read_snapshot,
    snapshots,
    to_lf,
    write_text,
)

#: Versions kept per file for undo_edit.
HISTORY_DEPTH = 10
#: Characters of history kept across all files; the oldest versions are forgotten first.
HISTORY_BUDGET_CHARS = 64 * 1024 * 1024
#: Lines shown either side of an edit, so the model can check indentation and neighbours.
SNIPPET_CONTEXT = 4


@dataclass(frozen=True)
class _Version:
    seq: int
    #: The file's text as it was; None when the edit created the file.
    text: str | None


class _History:
    """Previous versions per file for undo_edit, bounded per file and in total size."""

    def __init__(self, depth: int = HISTORY_DEPTH, budget: int = HISTORY_BUDGET_CHARS) -> None:
        self._depth = depth
        self._budget = budget
        self._versions: dict[Path, list[_Version]] = {}
        self._seq = 0
        self._chars = 0

    def push(self, path: Path, text: str | None) -> None:
        self._seq += 1
        self._versions.setdefault(path, []).append(_Version(self._seq, text))
        self._chars += len(text or "")
        if len(self._versions[path]) > self._depth:
            self._drop_oldest(path)
        while self._chars > self._budget:
            self._drop_oldest(min(self._versions, key=lambda p: self._versions[p][0].seq))

    def pop(self, path: Path) -> _Version | None:
        versions = self._versions.get(path)
        if not versions:
            return None
        version = versions.pop()
        self._forget(path, version)
        return version

    def _drop_oldest(self, path: Path) -> None:
        self._forget(path, self._versions[path].pop(0))

    def _forget(self, path: Path, version: _Version) -> None:
        self._chars -= len(version.text or "")
        if not self._versions[path]:
            del self._versions[path]


class FileEditorTool(Tool):
    name = "file_editor"
    description = (
        "View, create and edit UTF-8 text files.\n"
        "* `path` must be absolute, e.g. /workspace/project/src/app.py.\n"
        "* view: on a file, shows its lines numbered like `cat -n`; pass view_range "
        "[start, end] for part of a long file (end -1 reads to the end). On a directory, "
        "lists files and directories two levels deep, hidden ones left out.\n"
        "* create: writes a new file containing file_text, making parent directories as "
        "needed; refuses if the file already exists.\n"
        "* str_replace: replaces old_str with new_str. old_str must match exactly one place "
        "in the file, character for character including whitespace and indentation: include "
        "enough surrounding lines to make it unique. An empty new_str deletes old_str.\n"
        "* insert: inserts new_str as new lines after line insert_line (0 = top of file).\n"
        "* undo_edit: reverts the last create, str_replace or insert on that file "
        f"(up to {HISTORY_DEPTH} steps back).\n"
        "Notes: view a file before editing it. The line numbers shown by view are not part "
        "of the file; never put them in old_str. Output over 30,000 characters is clipped. "
        "Binary files and files over 10 MB are refused: use the terminal for those."
    )
    action_type = FileEditorAction
    observation_type = FileEditorObservation
    acts = True
    read_only = False

    def __init__(self, ctx: ToolContext, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(ctx, params)
        self._history = _History()
        # A lock held in the worker thread, not an asyncio one: a cancelled call's thread
        # runs on to the end, and the next call must not edit the file underneath it.
        self._lock = threading.Lock()

    async def run(self, action: FileEditorAction) -> FileEditorObservation:
        try:
            result: FileEditorObservation = await run_in_thread(self._run_locked, action)
            return result
        except Refusal as refusal:
            return FileEditorObservation(
                command=action.command,
                path=action.path,
                is_error=True,
                content=[TextContent(text=str(refusal))],
            )
        except OSError as e:
            where = f" ({e.filename})" if e.filename else ""
            message = f"{action.command} on {action.path} failed: {e.strerror or e}{where}"
            raise ToolError(message) from e

    def _run_locked(self, action: FileEditorAction) -> FileEditorObservation:
        with self._lock:
            path = self._absolute(action.path)
            commands = {
                "view": self._view,
                "create": self._create,
                "str_replace": self._str_replace,
                "insert": self._insert,
                "undo_edit": self._undo,
            }
            return commands[action.command](action, path)

    def _absolute(self, raw: str) -> Path:
        return files.absolute(self.ctx.working_dir, raw, "file_editor")

    # -- commands --------------------------------------------------------------------------

    def _view(self, action: FileEditorAction, path: Path) -> FileEditorObservation:
        if path.is_dir():
            if action.view_range is not None:
                raise Refusal("view_range only applies to files, and this path is a directory.")
            return _observe(action, path, list_dir(path))
        if not path.exists():
            raise Refusal(
                f"The path {path} does not exist. View {path.parent} to see what is there."
            )
        if not path.is_file():
            raise Refusal(f"{path} is not a regular file.")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES and action.view_range is None:
            raise Refusal(
                f"{path} is {megabytes(size)}, too big to view whole. Pass view_range "
                "to see part of it, or search it with grep in the terminal."
            )
        if size > MAX_FILE_BYTES:
            start, end = parse_range(action.view_range)
            text = numbered_stream(path, start, end)
        else:
            text = view_text(to_lf(_read_file(path))[0], action.view_range)
        return _observe(action, path, f"Here's the result of running `cat -n` on {path}:\n{text}")

    def _create(self, action: FileEditorAction, path: Path) -> FileEditorObservation:
        if action.file_text is None:
            raise Refusal("Parameter `file_text` is required for the create command.")
        if path.is_dir():
            raise Refusal(f"{path} is a directory; create makes files.")
        if path.exists() or path.is_symlink():
            raise Refusal(
                f"File already exists at {path}. Use str_replace to change it, "
                "or delete it first if you mean to write it anew."
            )
        check_size(action.file_text, path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("x", encoding="utf-8", newline="") as f:
            f.write(action.file_text)
        self._history.push(path, None)
        return _observe(
            action,
            path,
            f"File created successfully at: {path}",
            prev_exist=False,
            **snapshots(None, action.file_text),
        )

    def _str_replace(self, action: FileEditorAction, path: Path) -> FileEditorObservation:
        if action.old_str is None:
            raise Refusal("Parameter `old_str` is required for the str_replace command.")
        if action.old_str == "":
            raise Refusal("old_str is empty; give the exact text to replace.")
        before = _read_file(path)
        text, crlf = to_lf(before)
        old, new = action.old_str, action.new_str or ""
        if crlf:
            # The file's CRLF line ends are hidden while editing, so match on LF alone.
            old, new = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
        if old == new:
            raise Refusal("No replacement was performed: old_str and new_str are the same.")
        starts = find_all(text, old, limit=20)
        if not starts:
            raise Refusal(
                f"No replacement was performed: old_str was not found verbatim in {path}. It "
                "must match exactly, whitespace and indentation included; view the file and "
                "copy the text from it."
            )
        if len(starts) > 1:
            lines = ", ".join(str(line_of(text, s)) for s in starts)
            many = "more than 20 times" if len(starts) > 20 else f"{len(starts)} times"
            raise Refusal(
                f"No replacement was performed: old_str occurs {many} in {path}, starting at "
                f"lines {lines}. Include more surrounding lines so it matches only one place."
            )
        edited = text[: starts[0]] + new + text[starts[0] + len(old) :]
        first = line_of(text, starts[0])
        return self._commit(action, path, before, from_lf(edited, crlf), edited, first, new)

    def _insert(self, action: FileEditorAction, path: Path) -> FileEditorObservation:
        if action.new_str is None:
            raise Refusal("Parameter `new_str` is required for the insert command.")
        if action.insert_line is None:
            raise Refusal("Parameter `insert_line` is required for the insert command.")
        before = _read_file(path)
        text, crlf = to_lf(before)
        lines, trailing_newline = split_lines(text)
        at = action.insert_line
        if at > len(lines):
            raise Refusal(
                f"insert_line {at} is out of range: {path} has {len(lines)} lines, so it must "
                f"be between 0 (top of file) and {len(lines)} (end of file)."
            )
        # A trailing newline in new_str ends its last line rather than adding a blank one.
        block = action.new_str.replace("\r\n", "\n").removesuffix("\n")
        edited_lines = lines[:at] + block.split("\n") + lines[at:]
        edited = "\n".join(edited_lines) + ("\n" if trailing_newline else "")
        return self._commit(action, path, before, from_lf(edited, crlf), edited, at + 1, block)

    def _undo(self, action: FileEditorAction, path: Path) -> FileEditorObservation:
        version = self._history.pop(path)
        if version is None:
            raise Refusal(f"No edit history for {path}: there is nothing to undo.")
        current = read_snapshot(path)
        if version.text is None:
            path.unlink(missing_ok=True)
            return _observe(
                action,
                path,
                f"Undid the creation of {path}: the file was removed.",
                **snapshots(current, None),
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, version.text)
        shown = view_text(to_lf(version.text)[0], None)
        return _observe(
            action,
            path,
            f"Last edit to {path} undone. Here's the result of running `cat -n` on {path}:\n"
            f"{shown}",
            **snapshots(current, version.text),
        )

    def _commit(
        self,
        action: FileEditorAction,
        path: Path,
        before: str,
        after: str,
        edited_lf: str,
        first_line: int,
        inserted: str,
    ) -> FileEditorObservation:
        """Write an edit, remember the old version, and show the edited region."""
        check_size(after, path)
        write_text(path, after)
        self._history.push(path, before)
        last_line = first_line + inserted.count("\n")
        snippet = numbered(
            split_lines(edited_lf)[0],
            max(1, first_line - SNIPPET_CONTEXT),
            last_line + SNIPPET_CONTEXT,
        )
        return _observe(
            action,
            path,
            f"The file {path} has been edited. Here's the result of running `cat -n` on a "
            f"snippet of {path}:\n{snippet}\n"
            "Review the changes and make sure they are as expected (indentation, no duplicated "
            "lines). Edit the file again if necessary.",
            **snapshots(before, after),
        )


# -- reading and writing -----------------------------------------------------------------


def _read_file(path: Path) -> str:
    """The text of a file to edit, refusing what this tool cannot edit safely."""
    if path.is_dir():
        raise Refusal(f"{path} is a directory; only view works on directories.")
    return files.read_text(path, missing_hint=" Use create to make a new file.")


def _observe(
    action: FileEditorAction, path: Path, text: str, **fields: Any
) -> FileEditorObservation:
    return FileEditorObservation(
        command=action.command, path=str(path), content=[TextContent(text=text)], **fields
    )


TOOL_SET = single(FileEditorTool)

__all__ = [
    "TOOL_SET",
    "FileEditorAction",
    "FileEditorObservation",
    "FileEditorTool",
]
