"""Paths confined to a root directory (a workspace): the one check behind the file routes and
the file tools."""

from __future__ import annotations

import os
from pathlib import Path


class OutsideRoot(ValueError):
    """The path leaves the root (`..`, another absolute path, a symlink) or cannot be read."""


def confine(root: Path, raw: str) -> Path:
    """`raw` (relative to root, or absolute) as a real path that is root or inside it.

    Symlinks are resolved first, so a link anywhere on the path that points out is refused
    like `..` is; what does not exist yet resolves as written.
    """
    if "\x00" in raw:
        raise OutsideRoot("the path holds a NUL character")
    try:
        base = Path(os.path.realpath(root))
        target = Path(os.path.realpath(os.path.join(base, raw)))
    except OSError:  # the path changed under us while it was resolved
        raise OutsideRoot(f"{raw!r} could not be resolved inside {root}") from None
    if target != base and base not in target.parents:
        raise OutsideRoot(f"{raw!r} is outside the working directory {root}")
    return target


def confine_fd(root: Path, fd: int) -> Path:
    """The real path of an opened descriptor, which must be root or inside it.

    `confine` checks a path before it is opened; this checks what was opened, so a directory
    on the path swapped for a link in between is caught (O_NOFOLLOW covers the last part).
    """
    return confine(root, f"/proc/self/fd/{fd}")
