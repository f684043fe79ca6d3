"""The files a search looks at: under one workspace directory, hidden files, symlinks and
what .gitignore names left out, by ripgrep when the system has it, else by Python.

Symlinks are never followed (a link could lead out of the workspace), and both walks stop at
a deadline so a search of a huge tree answers in bounded time, saying it is incomplete.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.processes import child_env, run_process
from tools import files
from tools.search.ignore import for_directory, is_hidden

#: Seconds a walk or a search may take.
SEARCH_TIMEOUT = 30.0
#: Bytes of file names (or search output) read from ripgrep; more is counted, not kept.
MAX_LISTING_BYTES = 64 * 1024 * 1024
#: ripgrep's options for every run: no user config, no colour, .gitignore even outside Git.
RG_BASE = ["--no-config", "--color", "never", "--no-messages", "--no-require-git", "--null"]


def ripgrep() -> str | None:
    """The ripgrep binary, or None to use the Python fallback (tests replace this)."""
    return shutil.which("rg")


@dataclass
class Listing:
    """Relative paths (`/`-separated) and whether the walk saw everything."""

    paths: list[str] = field(default_factory=list)
    complete: bool = True


async def list_files(base: Path, env: dict[str, str]) -> Listing:
    rg = ripgrep()
    if rg is None:
        return await asyncio.to_thread(walk_python, base, env, SEARCH_TIMEOUT)
    done = await run_process(
        [rg, "--files", *RG_BASE], base, child_env(env), SEARCH_TIMEOUT, keep=MAX_LISTING_BYTES
    )
    paths = split_null(done.stdout.head)
    complete = not done.timed_out and done.stdout.total <= len(done.stdout.head)
    if not complete and paths:
        paths.pop()  # the last name may be cut
    return Listing(paths, complete)


def split_null(data: bytes) -> list[str]:
    return [p for p in data.decode(errors="surrogateescape").split("\0") if p]


def search_dir(root: Path, raw: str | None) -> Path:
    """The directory to search: the workspace, or a directory inside it."""
    if raw is None or not raw.strip():
        return Path(os.path.realpath(root))
    path = files.confined(root, raw)
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is not a directory"
        raise files.Refusal(f"The search path {raw} {what}; give a directory in the workspace.")
    return path


def walk_python(
    base: Path, env: dict[str, str], timeout: float, keep: Callable[[str], bool] | None = None
) -> Listing:
    """Breadth first, one level at a time, so Git is asked about a whole level at once."""
    deadline = time.monotonic() + timeout
    ignorer = for_directory(base, child_env(env))
    listing = Listing()
    level = [""]
    while level:
        entries: list[tuple[str, bool]] = []
        for directory in level:
            if time.monotonic() > deadline:
                listing.complete = False
                return listing
            entries += _entries(base, directory)
        hidden = ignorer.ignored(entries)
        level = [p for p, is_dir in entries if is_dir and p not in hidden]
        listing.paths += [
            p
            for p, is_dir in entries
            if not is_dir and p not in hidden and (keep is None or keep(p))
        ]
    return listing


def _entries(base: Path, directory: str) -> list[tuple[str, bool]]:
    """(relative path, is a directory) of the visible entries; links and specials left out."""
    try:
        with os.scandir(base / directory) as it:
            found = []
            for entry in it:
                if is_hidden(entry.name) or entry.is_symlink():
                    continue
                rel = f"{directory}/{entry.name}" if directory else entry.name
                if entry.is_dir(follow_symlinks=False):
                    found.append((rel, True))
                elif entry.is_file(follow_symlinks=False):
                    found.append((rel, False))
            return sorted(found)
    except OSError:
        return []


def newest_first(base: Path, paths: list[str]) -> list[str]:
    """Most recently modified first (what was just edited is likeliest to matter), then by
    name; files gone since the walk are dropped."""
    dated = []
    for p in paths:
        try:
            dated.append((-os.stat(base / p, follow_symlinks=False).st_mtime, p))
        except OSError:
            continue
    return [p for _, p in sorted(dated)]


__all__ = [
    "Listing",
    "list_files",
    "newest_first",
    "ripgrep",
    "search_dir",
    "split_null",
    "walk_python",
]
