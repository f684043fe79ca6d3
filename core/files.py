"""Small files replaced whole and atomically: a crash leaves the old file or the new one,
never a torn mix (temp file beside the target, fsync, rename, fsync of the directory).

Descriptor-relative writers that must not follow a swapped-in symlink (the workspace
upload) keep their own loop; they follow the same steps.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: bytes, mode: int = 0o600, *, keep_mode: bool = False,
                 parents: bool = True) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new file.

    `path` itself is replaced: a symlink there becomes a file (resolve it first to write
    through it). With `keep_mode`, an existing file's mode bits (an executable script stays
    executable) and, where allowed, its owner carry over; a new file gets `mode`. With
    `parents` false a missing directory is an error instead of being made (for a directory
    that may have been deleted on purpose).
    """
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        previous = _existing(path) if keep_mode else None
        os.fchmod(fd, mode if previous is None else stat.S_IMODE(previous.st_mode))
        if previous is not None:
            with contextlib.suppress(OSError):  # only root may give a file away
                os.fchown(fd, previous.st_uid, previous.st_gid)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _sync_directory(path.parent)


def write_json(path: Path, value: Any, mode: int = 0o600) -> None:
    """`value` as indented JSON with sorted keys (diffable), written atomically."""
    write_atomic(path, json.dumps(value, indent=1, sort_keys=True).encode(), mode)


def read_json(path: Path) -> Any:
    """The JSON value in `path`; OSError and ValueError are the caller's to handle."""
    with open(path, "rb") as f:
        return json.loads(f.read())


def _existing(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _sync_directory(directory: Path) -> None:
    """Make the rename itself durable. A directory this user may not open for reading
    cannot be synced: the file is already in place, so that is not a failure."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except PermissionError:
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


__all__ = ["read_json", "write_atomic", "write_json"]
