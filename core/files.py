"""Files replaced whole and atomically, and regular files opened for reading inside a root.

A replaced file is the old one or the new one after a crash, never a torn mix: the bytes go to
a temporary file beside the target, which is fsync'd, renamed over it, and the directory is
fsync'd. Every step works relative to the directory's descriptor, so a caller that checked
that descriptor (inside a workspace, `core.paths.confine_fd`) knows where the file lands even
if a directory on the path is swapped for a link meanwhile. `Replacement` is the one writer:
the server's own state (`write_atomic`, `write_json`), the tools' edits (tools.files) and the
workspace upload (agent_server.workspace) all go through it.

`open_regular` is the read side of the same rule: the last component is not followed and the
opened descriptor is checked to be inside the root.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from core.paths import confine_fd

#: The mode of a new workspace file (the agent's, an upload's): the user's other tools read it.
#: The server's own state is written 0o600, write_atomic's default.
WORKSPACE_FILE_MODE = 0o644
#: Bytes of the target's name kept in its temporary file's name: the target may use all of
#: NAME_MAX (255), and the temporary name adds a prefix and a suffix.
_STEM_BYTES = 100


class NotRegularFile(Exception):
    """A device, FIFO or socket where a regular file was wanted."""


class FileTooLarge(Exception):
    """The file is over the size the caller reads."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size} bytes; the limit is {limit}")
        self.size, self.limit = size, limit


# -- writing ---------------------------------------------------------------------------------


class Replacement:
    """A new version of the file `name` in the directory `dir_fd`, written beside it.

    The temporary file is made with O_EXCL and never through a link. `commit()` gives it its
    mode (with `keep_mode`, an existing file's mode bits, so a script stays executable, and
    its owner where allowed; else `mode`), fsyncs it, renames it over `name` and fsyncs the
    directory; `discard()` removes it. As a context manager it commits when the block ends
    normally and discards otherwise. `name` itself is replaced: a link there becomes a file.
    """

    def __init__(
        self, dir_fd: int, name: str, mode: int = 0o600, *, keep_mode: bool = False
    ) -> None:
        self.dir_fd, self.name = dir_fd, name
        self._previous = _stat_at(dir_fd, name) if keep_mode else None
        self._mode = mode if self._previous is None else stat.S_IMODE(self._previous.st_mode)
        stem = os.fsencode(name)[:_STEM_BYTES].decode("utf-8", "ignore")
        self.tmp = f".{stem}.{secrets.token_hex(6)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        self._fd = os.open(self.tmp, flags, 0o600, dir_fd=dir_fd)
        self._renamed = False

    def write(self, data: bytes) -> None:
        write_all(self._fd, data)

    def commit(self) -> None:
        """Make the new version the file (blocking)."""
        try:
            os.fchmod(self._fd, self._mode)
            if self._previous is not None:
                with contextlib.suppress(OSError):  # only root may give a file away
                    os.fchown(self._fd, self._previous.st_uid, self._previous.st_gid)
            os.fsync(self._fd)
        finally:
            self._close()
        os.replace(self.tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        self._renamed = True
        sync_directory(self.dir_fd)

    def discard(self) -> None:
        """Remove the temporary file (nothing once committed)."""
        self._close()
        if not self._renamed:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp, dir_fd=self.dir_fd)

    def _close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __enter__(self) -> Replacement:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is not None:
            self.discard()
            return
        try:
            self.commit()
        except BaseException:
            self.discard()
            raise


def write_atomic(
    path: Path, data: bytes, mode: int = 0o600, *, keep_mode: bool = False, parents: bool = True
) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new file.

    `path` itself is replaced: a symlink there becomes a file (resolve it first to write
    through it). `mode` and `keep_mode` are Replacement's. With `parents` false a missing
    directory is an error instead of being made (for a directory that may have been deleted
    on purpose).
    """
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    dir_fd = open_directory(path.parent)
    try:
        with Replacement(dir_fd, path.name, mode, keep_mode=keep_mode) as new:
            new.write(data)
    finally:
        os.close(dir_fd)


def write_in_place(dir_fd: int, name: str, data: bytes, mode: int = 0o600) -> None:
    """Overwrite (or create) `name` in place: not atomic, for when no Replacement can be made
    (a directory that takes no new file, a bind-mounted file that cannot be renamed over)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, mode, dir_fd=dir_fd)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd` (os.write may take only part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def open_directory(path: Path, *, follow: bool = True) -> int:
    """A descriptor of the directory `path` to work relative to (without `follow`, a link as
    its last component is refused). A directory this user may not read is still opened, as a
    path only: files can be made and renamed in it, it cannot be synced."""
    flags = os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        return os.open(path, os.O_RDONLY | flags)
    except PermissionError:
        return os.open(path, os.O_PATH | flags)


def sync_directory(dir_fd: int) -> None:
    """Make a rename in the directory durable; a descriptor that cannot be synced (opened as
    a path only, a file system without it) is not a failure: the file is in place."""
    try:
        os.fsync(dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.EBADF, errno.EINVAL):
            raise


def write_json(path: Path, value: Any, mode: int = 0o600) -> None:
    """`value` as indented JSON with sorted keys (diffable), written atomically."""
    write_atomic(path, json.dumps(value, indent=1, sort_keys=True).encode(), mode)


def read_json(path: Path) -> Any:
    """The JSON value in `path`; OSError and ValueError are the caller's to handle."""
    with open(path, "rb") as f:
        return json.loads(f.read())


def _stat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None


# -- reading inside a root -------------------------------------------------------------------


def open_regular(path: Path, max_bytes: int, *, root: Path | None = None) -> tuple[BinaryIO, int]:
    """A regular file opened for reading (blocking: call it in a thread), and its size.

    The open never blocks on a FIFO. With `root`, the last component is not followed and the
    descriptor must be inside root, so a link swapped in after the path was confined cannot
    lead out. Raises what os.open raises (FileNotFoundError, PermissionError...), OutsideRoot,
    IsADirectoryError, NotRegularFile, or FileTooLarge over `max_bytes`.
    """
    nofollow = os.O_NOFOLLOW if root is not None else 0
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | nofollow)
    try:
        if root is not None:
            confine_fd(root, fd)
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(str(path))
        if info.st_size > max_bytes:
            raise FileTooLarge(info.st_size, max_bytes)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb"), info.st_size


__all__ = [
    "FileTooLarge",
    "NotRegularFile",
    "Replacement",
    "WORKSPACE_FILE_MODE",
    "open_directory",
    "open_regular",
    "read_json",
    "sync_directory",
    "write_all",
    "write_atomic",
    "write_in_place",
    "write_json",
]
