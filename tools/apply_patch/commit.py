"""A parsed patch staged in memory, then written all or nothing.

Every new content is computed before the first write, so a hunk that does not match changes
nothing. The writes are then done one by one, each atomic (temp file, fsync, rename); if one
fails, those already done are put back as they were, and directories the patch created are
removed again.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tools import files
from tools.apply_patch.hunks import apply_hunks
from tools.apply_patch.parse import AddFile, DeleteFile, FileOp, PatchError

ChangeType = Literal["add", "delete", "update"]


class WriteFailed(PatchError):
    """A write failed after others were done; they were undone (`unrestored` says which not)."""

    def __init__(self, message: str, unrestored: list[str]) -> None:
        super().__init__(message)
        self.unrestored = unrestored


@dataclass
class Change:
    """One file operation of the patch, staged (paths as the patch wrote them)."""

    type: ChangeType
    path: str
    before: str | None
    after: str | None
    move_path: str | None = None


@dataclass
class Write:
    """One step on disk: `after` None deletes the file; `before` None means it was absent."""

    path: Path
    before: str | None
    after: str | None


@dataclass
class Staged:
    changes: list[Change]
    writes: list[Write]
    fuzz: int


def stage(root: Path, ops: list[FileOp]) -> Staged:
    """The patch's effect computed in memory; PatchError (nothing written) if any part fails."""
    changes: list[Change] = []
    writes: list[Write] = []
    fuzz = 0
    targets: dict[Path, str] = {}

    def claim(raw: str) -> Path:
        path = _inside(root, raw)
        if path in targets:
            raise PatchError(
                f"{raw}: the patch changes this file twice (also as "
                f"{targets[path]}); give each file one section."
            )
        targets[path] = raw
        return path

    for op in ops:
        if isinstance(op, AddFile):
            path = claim(op.path)
            if os.path.lexists(path):
                raise PatchError(
                    f"Add File {op.path}: the file already exists; use Update "
                    "File to change it (or Delete File first)."
                )
            files.check_size(op.text, path, "apply_patch")
            changes.append(Change("add", op.path, None, op.text))
            writes.append(Write(path, None, op.text))
        elif isinstance(op, DeleteFile):
            path = claim(op.path)
            before = _read(root, path, op.path)
            changes.append(Change("delete", op.path, before, None))
            writes.append(Write(path, before, None))
        else:
            path = claim(op.path)
            raw = _read(root, path, op.path)
            text, crlf = files.to_lf(raw)
            applied = apply_hunks(op.path, text, op.hunks)
            after = files.from_lf(applied.text, crlf)
            files.check_size(after, path, "apply_patch")
            fuzz += applied.fuzz
            if op.move_to is None:
                changes.append(Change("update", op.path, raw, after))
                writes.append(Write(path, raw, after))
                continue
            dest = claim(op.move_to)
            if os.path.lexists(dest):
                raise PatchError(
                    f"Update File {op.path}: cannot move to {op.move_to}, which already exists."
                )
            changes.append(Change("update", op.path, raw, after, move_path=op.move_to))
            # The new file first: if that fails, the old one is still untouched.
            writes += [Write(dest, None, after), Write(path, raw, None)]
    return Staged(changes, writes, fuzz)


def write_all(root: Path, writes: list[Write]) -> None:
    """Carry out the writes in order; on a failure, undo the ones done and raise PatchError."""
    done: list[Write] = []
    made: list[Path] = []
    for write in writes:
        try:
            if write.after is None:
                files.remove(write.path, root=root)
            else:
                made += _missing_dirs(write.path)
                files.make_parents(write.path, root)
                files.write_text(write.path, write.after, root=root)
        except (OSError, files.Refusal) as e:
            failed = _undo(root, done, made)
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            message = (
                f"Writing {write.path} failed ({reason}); the patch was not applied and "
                "the files it had already written were restored."
            )
            if failed:
                message += " These could not be restored: " + ", ".join(failed) + "."
            raise WriteFailed(message, failed) from e
        done.append(write)


def _undo(root: Path, done: list[Write], made: list[Path]) -> list[str]:
    """Put back what the writes in `done` changed; the paths that could not be restored."""
    failed: list[str] = []
    for write in reversed(done):
        try:
            if write.before is None:
                files.remove(write.path, root=root)
            else:
                files.make_parents(write.path, root)
                files.write_text(write.path, write.before, root=root)
        except (OSError, files.Refusal):
            failed.append(str(write.path))
    for directory in reversed(made):
        with contextlib.suppress(OSError):
            directory.rmdir()  # only if still empty
    return failed


def _missing_dirs(path: Path) -> list[Path]:
    """The parents of path that do not exist yet, outermost first."""
    missing: list[Path] = []
    parent = path.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    return list(reversed(missing))


def _inside(root: Path, raw: str) -> Path:
    try:
        return files.confined(root, raw)
    except files.Refusal as e:
        raise PatchError(str(e)) from None


def _read(root: Path, path: Path, raw: str) -> str:
    try:
        return files.read_text(path, root=root, tool="apply_patch")
    except files.Refusal as e:
        raise PatchError(f"{raw}: {e}") from None


__all__ = ["Change", "Staged", "Write", "WriteFailed", "stage", "write_all"]
