"""A workspace: paths confined to it, its files, and what its commands print.

A `Scope` is what a request may touch: one conversation's working directory (its secrets in
commands and masked in their output), or the host's (the server's default working directory
and every conversation's, with the settings' secrets). The per-conversation routes and the
OpenHands-style host routes share everything below through it.

Nothing here knows HTTP: a failure is an exception naming what went wrong, and api/ maps it
to a status. Blocking file work runs in threads. Commands run through core.processes, which
ends whatever they started.
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from core.files import (
    WORKSPACE_FILE_MODE,
    FileTooLarge,
    NotRegularFile,
    Replacement,
    open_directory,
    open_regular,
)
from core.masking import Masker
from core.paths import OutsideRoot, confine, confine_fd
from core.processes import CHUNK, MAX_OUTPUT_BYTES, Output
from web.errors import ServiceError


class WorkspaceError(ServiceError):
    """Base of the failures below; `detail` is the sentence a client reads."""

    status_code = 400


class OutsideWorkspace(WorkspaceError):
    """The path leaves the working directory (`..`, another absolute path, a symlink)."""

    status_code = 403


class PermissionDenied(WorkspaceError):
    """Inside the workspace, but the server's user may not read or write it."""

    status_code = 403


class FileMissing(WorkspaceError):
    """Nothing at that path."""

    status_code = 404


class NotAFile(WorkspaceError):
    """A directory (or a device, a socket) where a regular file was asked for, or a file where
    a directory was: what the workspace holds there conflicts with the request (409), which
    was valid as written (a 400 said it was not: schemathesis' ST202 on a write under a file
    an earlier write had made)."""

    status_code = 409


class NameTooLong(WorkspaceError):
    """A path component over NAME_MAX bytes, or a whole path over PATH_MAX: no file system
    here can hold it."""


class TooLarge(WorkspaceError):
    """Over the configured size cap."""

    status_code = 413

    def __init__(self, detail: str, limit: int) -> None:
        super().__init__(detail)
        self.limit = limit


# -- scopes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """What a workspace request may touch, and with which secrets."""

    key: str
    """"host", or the conversation's id (commands are kept apart by it)."""
    roots: tuple[Path, ...]
    """Where paths may lead; relative paths start at the first."""
    secrets: Mapping[str, str]
    masker: Masker

    @property
    def home(self) -> Path:
        return self.roots[0]

    def root_for(self, raw: str) -> Path:
        """The root a path is inside (the innermost when roots nest); OutsideWorkspace if none.
        Relative paths belong to the first root."""
        if not os.path.isabs(raw):
            return self.home
        found: Path | None = None
        for root in self.roots:
            try:
                confine(root, raw)
            except OutsideRoot:
                continue
            if found is None or len(Path(os.path.realpath(root)).parts) > len(
                Path(os.path.realpath(found)).parts
            ):
                found = root
        if found is None:
            raise OutsideWorkspace(
                f"{raw!r} is outside the working directories of this server"
                if len(self.roots) > 1
                else f"{raw!r} is outside the working directory {self.home}"
            )
        return found

    def resolve(self, raw: str) -> Path:
        return resolve(self.root_for(raw), raw)

    async def directory(self, raw: str | None, what: str = "directory") -> Path:
        """The existing directory `raw` names (None: home); FileMissing or NotAFile if not.
        `what` names it in the message (a command's `cwd`, a `path`)."""
        where = self.resolve(raw) if raw else self.home
        if not await asyncio.to_thread(where.exists):
            raise FileMissing(f"{what} {raw or str(where)!r} does not exist")
        if not await asyncio.to_thread(where.is_dir):
            raise NotAFile(f"{what} {raw!r} is not a directory")
        return where


# -- paths -----------------------------------------------------------------------------------

#: Linux's limits: bytes in one path component, and in a whole path (its NUL included).
NAME_MAX = 255
PATH_MAX = 4096


def resolve(root: Path, raw: str) -> Path:
    """`raw` confined to the working directory `root` (core.paths.confine), or OutsideWorkspace;
    NameTooLong when the system could not hold such a name."""
    try:
        encoded = os.fsencode(raw)
    except UnicodeEncodeError:  # a lone surrogate: no file has such a name
        raise WorkspaceError("the path is not valid Unicode") from None
    for part in encoded.split(b"/"):
        if len(part) > NAME_MAX:
            raise NameTooLong(
                f"a component of the path is over {NAME_MAX} bytes: {os.fsdecode(part[:40])!r}..."
            )
    try:
        path = confine(root, raw)
    except OutsideRoot as exc:
        raise OutsideWorkspace(str(exc)) from None
    if len(os.fsencode(path)) >= PATH_MAX:
        raise NameTooLong(f"the path is over {PATH_MAX - 1} bytes once resolved")
    return path


def _check_fd(root: Path, fd: int, raw: str) -> None:
    """What an opened descriptor really is must be inside root (core.paths.confine_fd)."""
    try:
        confine_fd(root, fd)
    except OutsideRoot:
        raise OutsideWorkspace(f"{raw!r} is outside the working directory {root}") from None


def relative(root: Path, path: Path) -> str:
    """A resolved path as the API shows it: relative to the working directory."""
    return path.relative_to(os.path.realpath(root)).as_posix()


# -- files -----------------------------------------------------------------------------------


@dataclass
class OpenedFile:
    """A regular file opened for reading; stream() closes it (and so does dropping it)."""

    file: BinaryIO
    size: int
    path: Path

    @property
    def media_type(self) -> str:
        return mimetypes.guess_type(self.path.name)[0] or "application/octet-stream"

    async def stream(self) -> AsyncIterator[bytes]:
        """The first `size` bytes (what was announced), in chunks; closes the file."""
        try:
            left = self.size
            while left > 0:
                chunk = await asyncio.to_thread(self.file.read, min(CHUNK, left))
                if not chunk:
                    return
                left -= len(chunk)
                yield chunk
        finally:
            self.file.close()


def open_file(root: Path, raw: str, max_bytes: int) -> OpenedFile:
    """Open a workspace file for reading (blocking: call it in a thread)."""
    path = resolve(root, raw)
    try:
        file, size = open_regular(path, max_bytes, root=root)
    except (FileNotFoundError, NotADirectoryError):
        raise FileMissing(f"no file {raw!r} in the working directory") from None
    except PermissionError:
        raise PermissionDenied(f"{raw!r} cannot be read: permission denied") from None
    except OutsideRoot:
        raise OutsideWorkspace(f"{raw!r} is outside the working directory {root}") from None
    except IsADirectoryError:
        raise NotAFile(f"{raw!r} is a directory") from None
    except NotRegularFile:
        raise NotAFile(f"{raw!r} is not a regular file") from None
    except FileTooLarge as exc:
        raise TooLarge(
            f"{raw!r} has {exc.size} bytes; the limit is {max_bytes}", max_bytes
        ) from None
    except OSError as exc:
        raise NotAFile(f"{raw!r} cannot be opened: {exc.strerror}") from None
    return OpenedFile(file, size, path)


def read_capped(path: Path, max_bytes: int) -> bytes | None:
    """A regular file's bytes, None when it is missing (blocking)."""
    try:
        opened = open_file(path.parent, path.name, max_bytes)
    except FileMissing:
        return None
    with opened.file as f:
        return f.read(opened.size)


async def write_file(
    root: Path, raw: str, chunks: AsyncIterator[bytes], max_bytes: int
) -> tuple[Path, int]:
    """Write a workspace file from chunks, creating its parents; all or nothing.

    The bytes go to a core.files.Replacement beside the target, renamed over it once
    complete, so a refused (too large) or broken upload leaves the old file as it was. The
    parent directory's descriptor is checked to be inside the workspace and every step works
    relative to it, so a directory swapped for a link meanwhile cannot redirect the write.
    """
    path = await asyncio.to_thread(_prepare_write, root, raw)
    try:
        dir_fd = open_directory(path.parent, follow=False)
    except PermissionError:
        raise PermissionDenied(f"{raw!r} cannot be written: permission denied") from None
    except OSError:
        raise OutsideWorkspace(f"{raw!r} could not be opened inside {root}") from None
    try:
        _check_fd(root, dir_fd, raw)
        try:
            new = Replacement(dir_fd, path.name, WORKSPACE_FILE_MODE, keep_mode=True)
        except PermissionError:
            raise PermissionDenied(f"{raw!r} cannot be written: permission denied") from None
        size = 0
        try:
            async for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise TooLarge(f"the upload is over the limit of {max_bytes} bytes", max_bytes)
                await _settled(new.write, chunk)
            await _settled(new.commit)
        except BaseException:
            new.discard()
            raise
    finally:
        os.close(dir_fd)
    return path, size


def _prepare_write(root: Path, raw: str) -> Path:
    path = resolve(root, raw)
    if path == Path(os.path.realpath(root)):
        raise NotAFile("the working directory itself is not a file")
    try:
        _make_parents(Path(os.path.realpath(root)), path.parent)
    except (FileExistsError, NotADirectoryError):
        raise NotAFile(f"a parent of {raw!r} is a file, not a directory") from None
    except PermissionError:
        raise PermissionDenied(f"{raw!r} cannot be written: permission denied") from None
    # A link created inside the workspace since resolve() would show here.
    resolve(root, str(path.parent))
    if path.is_dir():
        raise NotAFile(f"{raw!r} is a directory")
    return path


def _make_parents(root: Path, directory: Path) -> None:
    """mkdir -p from root down, one level at a time (Path.mkdir recurses once per level)."""
    current = root
    for part in directory.relative_to(root).parts:
        current = current / part
        try:
            current.mkdir()
        except FileExistsError:
            if not current.is_dir():
                raise


async def _settled(fn: Callable[..., None], *args: Any) -> None:
    """fn(*args) in a thread; when cancelled, returns only once the thread is done with it,
    so the caller's clean-up never closes a descriptor a write is still using."""
    work = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        await asyncio.shield(work)
    except asyncio.CancelledError:
        await asyncio.wait([work])
        raise


# -- command output --------------------------------------------------------------------------


def output_text(output: Output, limit: int, masker: Masker) -> str:
    """Decoded, secrets masked, cut to `limit` characters with a note of what was left out.

    Masking comes before the cut, and a head that was itself cut loses any tail that could be
    the start of a secret: no piece of one is ever shown.
    """
    text = masker.text(output.head.decode("utf-8", errors="replace"))
    if output.total > len(output.head):
        text = masker.without_partial_tail(text)
    if output.total <= limit and len(text) <= limit:
        return text
    return (
        text[:limit] + f"\n[output truncated: {output.total} bytes in all, the first {limit} shown]"
    )


def masked_keep(secrets: Mapping[str, str], limit: int = MAX_OUTPUT_BYTES) -> int:
    """How many bytes to keep so output_text can mask before it cuts at `limit`."""
    return limit + max((len(v.encode()) for v in secrets.values()), default=0)
