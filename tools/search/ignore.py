"""What .gitignore hides, for the Python fallback (ripgrep reads .gitignore itself).

In a Git work tree Git answers (`git check-ignore --stdin`, one run per directory level of
the walk), so every rule Git has (global excludes, info/exclude, nested files) holds. Outside
one, a small parser reads the .gitignore files met on the way down: comments, `!` negation,
trailing `/` for directories, a slash anchoring the pattern to its file's directory.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tools.search.patterns import compile_glob

#: Seconds one `git check-ignore` run may take before its answer is ignored.
GIT_TIMEOUT = 30.0


class Ignorer(Protocol):
    def ignored(self, paths: list[tuple[str, bool]]) -> set[str]:
        """The paths (relative, `/`-separated, with whether each is a directory) to leave out."""


def for_directory(base: Path, env: dict[str, str]) -> Ignorer:
    """Git's own answer inside a work tree, else the parser."""
    try:
        inside = subprocess.run(
            ["git", "rev-parse", "--is-inside-work-tree"],
            cwd=base,
            env=env,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if inside.returncode == 0 and inside.stdout.strip() == "true":
            return GitIgnorer(base, env)
    except (OSError, subprocess.TimeoutExpired):
        pass
    return ParsedIgnorer(base)


class GitIgnorer:
    def __init__(self, base: Path, env: dict[str, str]) -> None:
        self.base = base
        self.env = env

    def ignored(self, paths: list[tuple[str, bool]]) -> set[str]:
        if not paths:
            return set()
        data = "".join(f"{p}\0" for p, _ in paths).encode()
        try:
            done = subprocess.run(
                ["git", "check-ignore", "-z", "--stdin"],
                cwd=self.base,
                env=self.env,
                input=data,
                capture_output=True,
                timeout=GIT_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return set()
        if done.returncode not in (0, 1):  # 1: nothing ignored; else Git could not say
            return set()
        return {p for p in done.stdout.decode(errors="surrogateescape").split("\0") if p}


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool


class ParsedIgnorer:
    def __init__(self, base: Path) -> None:
        self.base = base
        self._rules: dict[str, list[_Rule]] = {}

    def ignored(self, paths: list[tuple[str, bool]]) -> set[str]:
        return {p for p, is_dir in paths if self._is_ignored(p, is_dir)}

    def _is_ignored(self, path: str, is_dir: bool) -> bool:
        parts = path.split("/")
        verdict = False
        for depth in range(len(parts)):  # the .gitignore of each directory above, root first
            where = "/".join(parts[:depth])
            below = "/".join(parts[depth:])
            for rule in self._rules_of(where):
                if rule.dir_only and not is_dir:
                    continue
                if rule.regex.fullmatch(below):
                    verdict = not rule.negated
        return verdict

    def _rules_of(self, directory: str) -> list[_Rule]:
        if directory not in self._rules:
            self._rules[directory] = _parse(self.base / directory / ".gitignore")
        return self._rules[directory]


def _parse(path: Path) -> list[_Rule]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read(1024 * 1024).splitlines()
    except OSError:
        return []
    rules: list[_Rule] = []
    for line in lines:
        line = line.rstrip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        line = line[1:] if negated else line
        line = line.removeprefix("\\")
        dir_only = line.endswith("/")
        rules.append(_Rule(compile_glob(line), negated, dir_only))
    return rules


def is_hidden(name: str) -> bool:
    return name.startswith(".")


__all__ = ["GitIgnorer", "Ignorer", "ParsedIgnorer", "for_directory", "is_hidden"]
