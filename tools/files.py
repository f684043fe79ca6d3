"""Paths, reads and atomic writes shared by every tool that touches workspace files.

file_editor, the Gemini-style file tools, apply_patch and the planning editor all read and
write through here, so a fix to what counts as inside the workspace, as text, or as a safe
write lands in every one of them at once.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from core.files import (
    WORKSPACE_FILE_MODE,
    FileTooLarge,
    NotRegularFile,
    Replacement,
    open_directory,
    open_regular,
    sync_directory,
    write_in_place,
)
from core.paths import OutsideRoot, confine, confine_fd

#: Larger files are refused for editing: the whole text is held in memory, and in history.
MAX_FILE_BYTES = 10 * 1024 * 1024
#: The most the model reads from one call; the rest is clipped with a note.
MAX_OUTPUT_CHARS = 30_000
#: old_content/new_content travel in events only up to this size, so the log stays bounded.
MAX_SNAPSHOT_BYTES = 64 * 1024


class Refusal(Exception):
    """A mistake in the call (bad path, text not found): told to the model, nothing changed."""


# -- paths -----------------------------------------------------------------------------------


def confined(root: Path, raw: str) -> Path:
    """`raw` (relative to root, or absolute) as a real path inside root, symlinks resolved.

    One rule with the file routes (agent_server.workspace.resolve): a link anywhere on the
    path that points out is refused like `..` is.
    """
    if not raw.strip():
        raise Refusal("The path is empty.")
    try:
        return confine(root, raw)
    except OutsideRoot:
        raise Refusal(
            f"{raw} is outside the workspace {root}; only paths inside it can be used."
        ) from None


def absolute(root: Path, raw: str, tool: str) -> Path:
    """An absolute path as given, normalised (file_editor's rule: any absolute path)."""
    if "\0" in raw:
        raise Refusal("The path contains a NUL character.")
    if not Path(raw).is_absolute():
        suggestion = os.path.normpath(root / raw)
        raise Refusal(
            f"The path {raw} is not an absolute path; {tool} needs absolute paths. "
            f"Did you mean {suggestion}?"
        )
    return Path(os.path.normpath(raw))


def shown(root: Path, path: Path) -> str:
    """A confined path as the model should write it back: relative to the workspace."""
    try:
        rel = path.relative_to(os.path.realpath(root))
    except ValueError:
        return str(path)
    return rel.as_posix() or "."


def _check_inside(root: Path, fd: int, path: Path) -> None:
    """What an opened directory really is must be inside root (one swapped for a link after
    `confined` ran is caught here)."""
    try:
        confine_fd(root, fd)
    except OutsideRoot:
        raise Refusal(f"{path} is outside the workspace {root}.") from None


# -- reading ---------------------------------------------------------------------------------


def read_bytes(
    path: Path,
    *,
    root: Path | None = None,
    limit: int = MAX_FILE_BYTES,
    tool: str = "file_editor",
    missing_hint: str = "",
) -> bytes:
    """A regular file's bytes, refusing directories, devices and files over `limit`.

    With `root`, the file is opened without following a final link and the descriptor is
    checked to be inside root, so a link swapped in meanwhile cannot lead out.
    """
    try:
        file, _ = open_regular(path, limit, root=root)
    except (FileNotFoundError, NotADirectoryError):
        raise Refusal(f"The file {path} does not exist.{missing_hint}") from None
    except PermissionError:
        raise Refusal(f"{path} cannot be read: permission denied.") from None
    except OutsideRoot:
        raise Refusal(f"{path} is outside the workspace {root}.") from None
    except IsADirectoryError:
        raise Refusal(f"{path} is a directory, not a file.") from None
    except NotRegularFile:
        raise Refusal(f"{path} is not a regular file.") from None
    except FileTooLarge as e:
        raise Refusal(
            f"{path} is {megabytes(e.size)}; {tool} handles files up to "
            f"{megabytes(limit)}. Use the terminal (sed, grep, a script) for this one."
        ) from None
    except OSError as e:
        raise Refusal(f"{path} cannot be opened: {e.strerror}.") from None
    with file:
        return file.read(limit + 1)[:limit]


def decode(data: bytes, path: Path, tool: str = "file_editor") -> str:
    """UTF-8 text, or a Refusal saying why this is not text the tool can handle."""
    if b"\0" in data:
        raise Refusal(
            f"{path} is a binary file (it contains NUL bytes); {tool} only handles UTF-8 "
            "text. Use the terminal to inspect it."
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Refusal(
            f"{path} is not UTF-8 text (undecodable byte at offset {e.start}); {tool} "
            "only handles UTF-8 text. Use the terminal to inspect it."
        ) from None


def read_text(
    path: Path, *, root: Path | None = None, tool: str = "file_editor", missing_hint: str = ""
) -> str:
    """A text file to edit, whole (up to MAX_FILE_BYTES)."""
    return decode(read_bytes(path, root=root, tool=tool, missing_hint=missing_hint), path, tool)


def read_snapshot(path: Path) -> str | None:
    """The current text for an event's diff, or None when it is gone, big or not text."""
    try:
        if path.stat().st_size > MAX_SNAPSHOT_BYTES:
            return None
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


# -- writing ---------------------------------------------------------------------------------


def make_parents(path: Path, root: Path | None = None) -> None:
    """Create the directories above path; with root, check no link led them out."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise Refusal(f"A parent of {path} is a file, not a directory.") from None
    if root is not None:
        confined(root, str(path.parent))


def write_text(path: Path, text: str, *, root: Path | None = None) -> None:
    """Replace the file whole (core.files.Replacement): a crash never leaves half a write.

    The temp file is made beside the target through the parent directory's descriptor (and,
    with root, that descriptor is checked to be inside the workspace), so a directory swapped
    for a link meanwhile cannot redirect the write. An existing file keeps its mode and owner.
    """
    target = Path(os.path.realpath(path))  # through links, so the link itself stays a link
    data = text.encode("utf-8")
    dir_fd = open_directory(target.parent)
    try:
        if root is not None:
            _check_inside(root, dir_fd, path)
        _replace_in(dir_fd, target.name, data)
    finally:
        os.close(dir_fd)


def _replace_in(dir_fd: int, name: str, data: bytes) -> None:
    try:
        new = Replacement(dir_fd, name, WORKSPACE_FILE_MODE, keep_mode=True)
    except PermissionError:
        # The directory is not writable though the file may be: write it in place instead.
        write_in_place(dir_fd, name, data, WORKSPACE_FILE_MODE)
        return
    try:
        with new:
            new.write(data)
    except OSError as e:
        # A bind-mounted file (/etc/hosts in a container) cannot be renamed over; anything
        # else (a full disk) must not fall through to a write that could tear the file.
        if e.errno != errno.EBUSY:
            raise
        write_in_place(dir_fd, name, data, WORKSPACE_FILE_MODE)


def remove(path: Path, *, root: Path | None = None) -> None:
    """Delete a file (never a directory), checked like a write."""
    dir_fd = open_directory(Path(os.path.realpath(path.parent)))
    try:
        if root is not None:
            _check_inside(root, dir_fd, path)
        os.unlink(path.name, dir_fd=dir_fd)
        sync_directory(dir_fd)
    finally:
        os.close(dir_fd)


def check_size(text: str, path: Path, tool: str = "file_editor") -> None:
    size = len(text.encode("utf-8"))
    if size > MAX_FILE_BYTES:
        raise Refusal(
            f"The new content of {path} would be {megabytes(size)}; {tool} writes files "
            f"up to {megabytes(MAX_FILE_BYTES)}."
        )


# -- text --------------------------------------------------------------------------------------


def snapshots(old: str | None, new: str | None) -> dict[str, str | None]:
    """Both sides of an edit, or neither: a diff against a missing side would mislead."""
    small = all(len(t.encode("utf-8")) <= MAX_SNAPSHOT_BYTES for t in (old, new) if t is not None)
    if not small:
        return {"old_content": None, "new_content": None}
    return {"old_content": old, "new_content": new}


def to_lf(raw: str) -> tuple[str, bool]:
    """Text with LF line ends, and whether every line end was CRLF (restored on writing)."""
    crlf_count = raw.count("\r\n")
    if crlf_count and crlf_count == raw.count("\n"):
        return raw.replace("\r\n", "\n"), True
    return raw, False


def from_lf(text: str, crlf: bool) -> str:
    return text.replace("\n", "\r\n") if crlf else text


def clip(
    text: str,
    how: str = "Use view_range to see a specific part, or grep in the terminal to find lines.",
    limit: int = MAX_OUTPUT_CHARS,
) -> str:
    """Cap what the model reads, at a line boundary, saying how to see the rest."""
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit)
    kept = text[: cut if cut > 0 else limit]
    return f"{kept}\n<response clipped: showing {len(kept):,} of {len(text):,} characters. {how}>"


def megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"


__all__ = [
    "MAX_FILE_BYTES",
    "MAX_OUTPUT_CHARS",
    "MAX_SNAPSHOT_BYTES",
    "Refusal",
    "absolute",
    "check_size",
    "clip",
    "confined",
    "decode",
    "from_lf",
    "make_parents",
    "megabytes",
    "read_bytes",
    "read_snapshot",
    "read_text",
    "remove",
    "shown",
    "snapshots",
    "to_lf",
    "write_text",
]
