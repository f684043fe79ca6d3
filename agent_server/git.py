"""Git in a workspace: the repositories in it, their changes against HEAD, and diffs.

Read-only: nothing here changes a repository (GIT_OPTIONAL_LOCKS=0 keeps even a status from
rewriting the index). The working directory is the ceiling: a repository above it is not the
workspace's, and one in a subdirectory (a clone beside other files) is found by a short walk.
Git runs as a subprocess with a timeout, never in the event loop's thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from agent_server.workspace import FileMissing, NotAFile, TooLarge, read_capped, resolve
from core.processes import child_env, run_process, stream_process
from web.errors import UpstreamError

GitStatus = Literal["ADDED", "UPDATED", "DELETED", "MOVED"]


class GitChange(BaseModel):
    path: str
    """Relative to the working directory (repositories in subdirectories included)."""
    status: GitStatus
    old_path: str | None = None
    """Where a MOVED file was in HEAD."""


class GitDiff(BaseModel):
    path: str
    original: str | None
    """The file in HEAD (null: not in HEAD)."""
    modified: str | None
    """The file in the working tree (null: deleted)."""


#: The tree of no files: the base of a repository without a first commit.
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
#: How deep below the working directory repositories are looked for, and how widely.
MAX_DEPTH = 3
MAX_DIRECTORIES = 5_000
SKIPPED = frozenset({".git", "node_modules", ".venv", "venv", "__pycache__", ".tox", ".cache"})
#: A repository's own settings must not run programs when we only look (fsmonitor, diff drivers).
logger = logging.getLogger(__name__)

GIT = [
    "git",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.quotepath=off",
    "-c",
    "safe.directory=*",
    "-c",
    "color.ui=false",
]
TIMEOUT = 60.0
#: Untracked files shown in the whole diff (each is one `git diff --no-index`).
MAX_UNTRACKED_DIFFS = 1_000
#: Listings (name-status, ls-files) beyond this are refused rather than cut.
MAX_LISTING_BYTES = 64 * 1024 * 1024
STATUS: dict[str, GitStatus] = {
    "A": "ADDED",
    "C": "ADDED",
    "M": "UPDATED",
    "T": "UPDATED",
    "U": "UPDATED",
    "D": "DELETED",
    "R": "MOVED",
}


class GitFailed(UpstreamError):
    """A git command the server ran failed (not the client's doing)."""

    status_code = 500

    def __init__(self, command: list[str], code: int, stderr: str) -> None:
        super().__init__(
            "GitFailed", f"git {' '.join(command)} exited with {code}: {stderr.strip()[-500:]}"
        )
        self.command, self.exit_code, self.stderr = command, code, stderr


class NotInRepository(FileMissing):
    """The path is in no Git repository of the working directory."""


@dataclass
class Repository:
    path: Path
    """Its work tree (a real path)."""
    prefix: str
    """Where it is, relative to the working directory ("" for the working directory itself)."""
    no_filters: list[str] | None = None
    """`-c` options that switch off the repository's own filter drivers (see _neutral)."""

    def shown(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel


def find_repositories(root: Path) -> list[Repository]:
    """Repositories at or below root (blocking). A repository's own subdirectories are its
    business: nested repositories and submodules are not looked for."""
    base = Path(os.path.realpath(root))
    found: list[Repository] = []
    queue = deque([(base, 0)])
    seen = 0
    while queue and seen < MAX_DIRECTORIES:
        directory, depth = queue.popleft()
        seen += 1
        if _is_repository(directory / ".git"):
            rel = directory.relative_to(base).as_posix()
            found.append(Repository(directory, "" if rel == "." else rel))
            continue
        if depth >= MAX_DEPTH:
            continue
        try:
            with os.scandir(directory) as entries:
                subdirs = sorted(
                    e.name
                    for e in entries
                    if e.is_dir(follow_symlinks=False) and e.name not in SKIPPED
                )
        except OSError:
            continue
        queue.extend((directory / name, depth + 1) for name in subdirs)
    return found


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in child_env().items() if not k.startswith("GIT_")}
    env.update(
        {
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_PAGER": "cat",
            "LC_ALL": "C",
            "GIT_CEILING_DIRECTORIES": str(Path(os.path.realpath(root)).parent),
        }
    )
    return env


def _is_repository(dot_git: Path) -> bool:
    """A `.git` directory with a HEAD, or a `.git` file pointing at one (worktrees)."""
    try:
        if dot_git.is_file():
            return dot_git.read_bytes()[:8] == b"gitdir: "
        return (dot_git / "HEAD").is_file()
    except OSError:
        return False


async def _neutral(repo: Repository) -> list[str]:
    """Options that switch off every filter driver the repository configures: reading changes
    must never run a program a workspace (or the agent) put in its .git/config."""
    if repo.no_filters is None:
        done = await run_process(
            [*GIT, "config", "--null", "--name-only", "--get-regexp", r"^filter\."],
            repo.path,
            _env(repo.path),
            TIMEOUT,
        )
        names = {
            n.rsplit(".", 1)[0]
            for n in done.stdout.head.decode(errors="replace").split("\0")
            if n.startswith("filter.")
        }
        repo.no_filters = [
            option
            for name in sorted(names)
            for option in (
                "-c",
                f"{name}.clean=",
                "-c",
                f"{name}.smudge=",
                "-c",
                f"{name}.process=",
                "-c",
                f"{name}.required=false",
            )
        ]
    return repo.no_filters


async def _git(
    repo: Repository, *args: str, keep: int = MAX_LISTING_BYTES, ok: tuple[int, ...] = (0,)
) -> bytes:
    argv = [*GIT, *await _neutral(repo), *args]
    done = await run_process(argv, repo.path, _env(repo.path), TIMEOUT, keep=keep + 1)
    if done.timed_out or done.exit_code not in ok:
        raise GitFailed(
            list(args), done.exit_code, done.stderr.head.decode(errors="replace") or "timed out"
        )
    if done.stdout.total > keep:
        raise TooLarge(f"git {args[0]} printed over {keep} bytes", keep)
    return done.stdout.head


async def _base(repo: Repository) -> str:
    """HEAD, or the empty tree before the first commit."""
    try:
        await _git(repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
        return "HEAD"
    except GitFailed:
        return EMPTY_TREE


@dataclass(frozen=True)
class Change:
    status: GitStatus
    path: str
    old_path: str | None = None


async def repository_changes(repo: Repository) -> list[Change]:
    """The work tree against HEAD, renames found, untracked files as ADDED (repo-relative)."""
    _, tracked, untracked = await _state(repo)
    return tracked + [Change("ADDED", p) for p in untracked]


async def _state(repo: Repository) -> tuple[str, list[Change], list[str]]:
    """The base (HEAD or the empty tree), the tracked changes, the untracked files."""
    base = await _base(repo)
    listing, untracked = await asyncio.gather(
        _git(
            repo, "diff", "--name-status", "-z", "-M", "--no-ext-diff", "--no-textconv", base, "--"
        ),
        _git(repo, "ls-files", "--others", "--exclude-standard", "-z"),
    )
    out: list[Change] = []
    fields = listing.decode(errors="surrogateescape").split("\0")
    i = 0
    while i < len(fields) and fields[i]:
        code = fields[i][0]
        if code in "RC":
            out.append(Change(STATUS[code], fields[i + 2], fields[i + 1] if code == "R" else None))
            i += 3
        else:
            out.append(Change(STATUS.get(code, "UPDATED"), fields[i + 1]))
            i += 2
    return base, out, [p for p in untracked.decode(errors="surrogateescape").split("\0") if p]


def _text(path: str) -> str:
    """A path as JSON can carry it (a name that is not UTF-8 gets replacement characters)."""
    return path.encode(errors="surrogateescape").decode(errors="replace")


async def changes(
    root: Path, ceiling: Path | None = None
) -> tuple[list[GitChange], list[Repository]]:
    """Every repository's changes at or below `root`, paths relative to it. A `root` inside a
    repository (below its top, which is at or below `ceiling`: the working directory) gets
    that repository's changes under it."""
    repos = await asyncio.to_thread(find_repositories, root)
    if not repos and ceiling is not None:
        enclosing = await asyncio.to_thread(_enclosing, root, ceiling)
        if enclosing is not None:
            return await _changes_below(enclosing, root), [enclosing]
    found = await asyncio.gather(*(_changes_or_none(r) for r in repos))
    items = [
        GitChange(
            path=_text(repo.shown(c.path)),
            status=c.status,
            old_path=None if c.old_path is None else _text(repo.shown(c.old_path)),
        )
        for repo, repo_changes in zip(repos, found)
        for c in repo_changes
    ]
    items.sort(key=lambda c: c.path)
    return items, repos


def _enclosing(root: Path, ceiling: Path) -> Repository | None:
    """The repository whose work tree holds `root`, if its top is at or below `ceiling`."""
    top = Path(os.path.realpath(ceiling))
    here = Path(os.path.realpath(root))
    for directory in (here, *here.parents):
        if directory != top and top not in directory.parents:
            return None
        if _is_repository(directory / ".git"):
            return Repository(directory, "")
    return None


async def _changes_below(repo: Repository, root: Path) -> list[GitChange]:
    """The repository's changes under `root` (a directory inside it), relative to `root`."""
    below = Path(os.path.realpath(root)).relative_to(repo.path).as_posix() + "/"
    items = [
        GitChange(
            path=_text(c.path[len(below) :]),
            status=c.status,
            old_path=None if c.old_path is None else _text(os.path.relpath(c.old_path, below)),
        )
        for c in await _changes_or_none(repo)
        if c.path.startswith(below)
    ]
    items.sort(key=lambda c: c.path)
    return items


async def _changes_or_none(repo: Repository) -> list[Change]:
    """A repository git cannot read is left out (and logged), not the end of the answer."""
    try:
        return await repository_changes(repo)
    except GitFailed as exc:
        logger.warning("skipping the repository at %s: %s", repo.path, exc)
        return []


def _holding(repos: list[Repository], target: Path) -> Repository | None:
    holders = [r for r in repos if target == r.path or r.path in target.parents]
    return max(holders, key=lambda r: len(r.path.parts), default=None)


async def file_diff(root: Path, raw: str, max_bytes: int) -> GitDiff:
    """One file in HEAD and in the work tree (a MOVED file's original is its old path's)."""
    target = resolve(root, raw)
    repos = await asyncio.to_thread(find_repositories, root)
    repo = _holding(repos, target)
    if repo is None:
        raise NotInRepository(f"{raw!r} is in no Git repository of the working directory")
    rel = target.relative_to(repo.path).as_posix()
    if rel == "." or rel == ".git" or rel.startswith(".git/"):
        raise NotAFile(f"{raw!r} is not a file of the repository")
    if await asyncio.to_thread(target.is_dir):
        raise NotAFile(f"{raw!r} is a directory")
    moved = [c for c in await repository_changes(repo) if c.status == "MOVED" and c.path == rel]
    old = moved[0].old_path if moved and moved[0].old_path else rel
    original: bytes | None = None
    if await _base(repo) == "HEAD":
        try:
            original = await _git(repo, "cat-file", "blob", f"HEAD:{old}", keep=max_bytes)
        except GitFailed:
            original = None
    modified = await asyncio.to_thread(read_capped, target, max_bytes)
    if original is None and modified is None:
        raise FileMissing(f"{raw!r} is neither in HEAD nor in the work tree")
    return GitDiff(
        path=_text(repo.shown(rel)),
        original=None if original is None else original.decode(errors="replace"),
        modified=None if modified is None else modified.decode(errors="replace"),
    )


async def unified_diff(repos: list[Repository], max_bytes: int) -> AsyncIterator[bytes]:
    """The whole diff of every repository against HEAD, untracked files as new ones; cut (with
    a note) past max_bytes."""
    sent = 0
    for repo in repos:
        prefixes = [f"--src-prefix=a/{repo.shown('')}", f"--dst-prefix=b/{repo.shown('')}"]
        common = ["--no-ext-diff", "--no-textconv", "--no-color", *prefixes]
        try:
            base, _, untracked = await _state(repo)
        except GitFailed as exc:  # the answer has begun: say so in it and go on
            yield f"[{repo.shown('') or '.'}: git could not read this repository: {exc}]\n".encode()
            continue
        git = [*GIT, *await _neutral(repo)]
        commands = [[*git, "diff", *common, "-M", base, "--"]]
        commands += [
            [*git, "diff", "--no-index", *common, "--", "/dev/null", path]
            for path in untracked[:MAX_UNTRACKED_DIFFS]
        ]
        for argv in commands:
            async for chunk in stream_process(argv, repo.path, _env(repo.path), TIMEOUT):
                if sent + len(chunk) > max_bytes:
                    yield chunk[: max_bytes - sent]
                    yield f"\n[diff truncated at {max_bytes} bytes]\n".encode()
                    return
                sent += len(chunk)
                yield chunk
        if len(untracked) > MAX_UNTRACKED_DIFFS:
            yield (
                f"[{len(untracked) - MAX_UNTRACKED_DIFFS} more untracked files in "
                f"{repo.shown('') or '.'} not shown]\n"
            ).encode()
