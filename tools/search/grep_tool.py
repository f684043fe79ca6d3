"""grep: which files hold a regular expression, and where (OpenHands' GrepAction shapes).

Two passes, both bounded: first the files that match (ripgrep `--files-with-matches`, or the
Python fallback), newest first and capped; then the matching lines of only the files shown,
a few per file. So a pattern found in 100,000 files costs a list of names, not every line.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from core.processes import child_env, run_process
from events.tools.search import GrepAction, GrepObservation
from tools import files
from tools.base import TextContent, Tool
from tools.search import walk
from tools.search.patterns import compile_glob
from tools.search.walk import (
    MAX_LISTING_BYTES,
    RG_BASE,
    SEARCH_TIMEOUT,
    newest_first,
    search_dir,
    split_null,
    walk_python,
)

#: Files listed; the rest are counted.
MAX_FILES = 100
#: Matching lines shown under each listed file.
LINES_PER_FILE = 10
#: Characters of one matching line shown.
LINE_CHARS = 300
#: The Python fallback reads at most this much of a file (ripgrep has no such limit).
MAX_SCAN_BYTES = 10 * 1024 * 1024


class _Failed(Exception):
    """The search could not run (a bad regex); the model reads the reason."""


class GrepTool(Tool):
    name = "grep"
    description = (
        "Search file contents in the workspace for a regular expression.\n"
        '* Full regex syntax, e.g. "log.*Error", "def\\s+\\w+" (ripgrep\'s flavour; Python\'s '
        "where ripgrep is not installed). Matching is per line and case-sensitive.\n"
        '* `include` filters files by a glob, e.g. "*.py" or "*.{ts,tsx}"; `path` narrows the '
        "search to a directory of the workspace.\n"
        "* Hidden files, binary files, symlinks and what .gitignore lists are left out.\n"
        f"* Lists the files that match, most recently modified first (at most {MAX_FILES}, "
        f"with a count of the rest), each with up to {LINES_PER_FILE} matching lines and their "
        "line numbers."
    )
    action_type = GrepAction
    observation_type = GrepObservation
    acts = False
    read_only = True

    async def run(self, action: GrepAction) -> GrepObservation:
        root = self.ctx.working_dir
        try:
            base = search_dir(root, action.path)
            if not action.pattern:
                raise files.Refusal("The pattern is empty; give a regular expression.")
            rg = walk.ripgrep()
            if rg is None:
                found, complete = await asyncio.to_thread(self._files_python, base, action)
            else:
                found, complete = await self._files_rg(rg, base, action)
            ordered = newest_first(base, found)
            shown = ordered[:MAX_FILES]
            if rg is None:
                lines = await asyncio.to_thread(_lines_python, base, shown, action.pattern)
            else:
                lines = await self._lines_rg(rg, base, shown, action.pattern)
        except (files.Refusal, _Failed) as e:
            return GrepObservation(
                matches=[],
                pattern=action.pattern,
                search_path=action.path or str(root),
                include_pattern=action.include,
                is_error=True,
                content=[TextContent(text=str(e))],
            )
        left_out = len(ordered) - len(shown)
        text = _render(base, action, shown, lines, left_out, complete)
        return GrepObservation(
            matches=[str(base / p) for p in shown],
            pattern=action.pattern,
            search_path=str(base),
            include_pattern=action.include,
            truncated=left_out > 0 or not complete,
            content=[TextContent(text=files.clip(text, how="Narrow the pattern or the path."))],
        )

    # -- ripgrep ---------------------------------------------------------------------------

    async def _files_rg(self, rg: str, base: Path, action: GrepAction) -> tuple[list[str], bool]:
        argv = [rg, "--files-with-matches", *RG_BASE]
        if action.include:
            argv += ["--glob", action.include]
        done = await run_process(
            [*argv, "--regexp", action.pattern],
            base,
            child_env(self.ctx.env),
            SEARCH_TIMEOUT,
            keep=MAX_LISTING_BYTES,
        )
        found = split_null(done.stdout.head)
        reason = done.stderr.head.decode(errors="replace").strip()[:2000]
        if done.exit_code == 2 and not found and reason:  # 2 alone: some file was unreadable
            raise _Failed(f"grep could not search for {action.pattern!r}:\n{reason}")
        complete = not done.timed_out and done.stdout.total <= len(done.stdout.head)
        if not complete and found:
            found.pop()  # the last name may be cut
        return found, complete

    async def _lines_rg(
        self, rg: str, base: Path, shown: list[str], pattern: str
    ) -> dict[str, list[tuple[int, str]]]:
        if not shown:
            return {}
        argv = [
            rg,
            *RG_BASE,
            "--line-number",
            "--no-heading",
            "--with-filename",
            "--max-count",
            str(LINES_PER_FILE),
            "--max-columns",
            str(LINE_CHARS),
            "--max-columns-preview",
            "--regexp",
            pattern,
            "--",
            *shown,
        ]
        done = await run_process(
            argv, base, child_env(self.ctx.env), SEARCH_TIMEOUT, keep=MAX_LISTING_BYTES
        )
        lines: dict[str, list[tuple[int, str]]] = {}
        for row in done.stdout.head.decode(errors="replace").split("\n"):
            name, _, rest = row.partition("\0")
            number, _, line = rest.partition(":")
            if number.isdigit():
                lines.setdefault(name, []).append((int(number), line))
        return lines

    # -- Python fallback -------------------------------------------------------------------

    def _files_python(self, base: Path, action: GrepAction) -> tuple[list[str], bool]:
        regex = _compile(action.pattern)
        include = compile_glob(action.include) if action.include else None
        listing = walk_python(
            base,
            dict(self.ctx.env),
            SEARCH_TIMEOUT,
            keep=lambda p: include is None or bool(include.fullmatch(p)),
        )
        found = [p for p in listing.paths if _file_matches(base / p, regex)]
        return found, listing.complete


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.MULTILINE)
    except re.error as e:
        raise _Failed(
            f"grep could not search for {pattern!r}: invalid regular expression ({e})."
        ) from None


def _read(path: Path) -> str | None:
    """A file's text for searching; None for binary files (NUL bytes) and unreadable ones."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SCAN_BYTES)
    except OSError:
        return None
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")


def _file_matches(path: Path, regex: re.Pattern[str]) -> bool:
    text = _read(path)
    return text is not None and regex.search(text) is not None


def _lines_python(base: Path, shown: list[str], pattern: str) -> dict[str, list[tuple[int, str]]]:
    regex = _compile(pattern)
    lines: dict[str, list[tuple[int, str]]] = {}
    for name in shown:
        text = _read(base / name) or ""
        for number, line in enumerate(text.split("\n"), 1):
            if regex.search(line):
                lines.setdefault(name, []).append((number, line[:LINE_CHARS]))
                if len(lines[name]) >= LINES_PER_FILE:
                    break
    return lines


def _render(
    base: Path,
    action: GrepAction,
    shown: list[str],
    lines: dict[str, list[tuple[int, str]]],
    left_out: int,
    complete: bool,
) -> str:
    where = f" in {base}" + (f" (files matching {action.include!r})" if action.include else "")
    if not shown:
        text = f"No matches for {action.pattern!r}{where}."
    else:
        total = len(shown) + left_out
        plural = "s" if total != 1 else ""
        out = [f"{total} file{plural} match {action.pattern!r}{where}, newest first:"]
        for name in shown:
            out.append(str(base / name))
            found = lines.get(name, [])
            out += [f"  {number}: {line[:LINE_CHARS]}" for number, line in found]
            if len(found) >= LINES_PER_FILE:
                out.append("  [more matches in this file not shown]")
        text = "\n".join(out)
    if left_out:
        text += (
            f"\n[{left_out} more files not shown: narrow the pattern, `include` or `path` "
            "to see them]"
        )
    if not complete:
        text += "\n[the search stopped early (time or size limit): results are incomplete]"
    return text


__all__ = ["LINES_PER_FILE", "MAX_FILES", "GrepAction", "GrepObservation", "GrepTool"]
