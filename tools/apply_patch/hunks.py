"""Hunks applied to a file's text, in memory.

Matching follows codex's apply_patch: each hunk is looked for after the previous one, first
exactly, then ignoring trailing whitespace, then ignoring whitespace at both ends, and the
looser the match the higher the `fuzz` reported (0, 1 and 100 per hunk, the cookbook's
scale), so the model knows when its context was not verbatim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tools.apply_patch.parse import Hunk, PatchError

#: Lines of a hunk quoted in an error (the rest is summarised).
QUOTED_LINES = 12

_LOOSENESS: tuple[tuple[int, Callable[[str], str]], ...] = (
    (0, lambda s: s),
    (1, str.rstrip),
    (100, str.strip),
)


@dataclass
class Applied:
    text: str
    fuzz: int


def apply_hunks(path: str, text: str, hunks: list[Hunk]) -> Applied:
    """The text after every hunk, or PatchError naming the file and the hunk that fails."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    edits: list[tuple[int, int, list[str]]] = []
    at = 0
    fuzz = 0
    for hunk in hunks:
        if hunk.context is not None:
            found = _seek(lines, [hunk.context], at, at_end=False)
            if found is None:
                raise _not_found(path, hunk, [hunk.context], "its @@ line")
            at, loose = found[0] + 1, found[1]
            fuzz += loose
        if not hunk.old:  # pure addition: after the @@ line, else at the end of the file
            edits.append((at if hunk.context is not None else len(lines), 0, hunk.new))
            continue
        old, new = hunk.old, hunk.new
        found = _seek(lines, old, at, hunk.at_end)
        if found is None and old[-1] == "":
            # A blank last context line may stand for the end of the file.
            old, new = old[:-1], new[:-1] if new and new[-1] == "" else new
            found = _seek(lines, old, at, hunk.at_end) if old else None
        if found is None:
            raise _not_found(path, hunk, hunk.old, "its lines")
        start, loose = found
        fuzz += loose
        edits.append((start, len(old), new))
        at = start + len(old)
    for start, count, new in sorted(edits, key=lambda e: e[0], reverse=True):
        lines[start : start + count] = new
    # Every line ends with a newline afterwards, as codex leaves it.
    return Applied("".join(f"{line}\n" for line in lines), fuzz)


def _seek(lines: list[str], wanted: list[str], start: int, at_end: bool) -> tuple[int, int] | None:
    """(index, fuzz) of the first place from `start` where `wanted` matches, loosest last."""
    if len(wanted) > len(lines):
        return None
    last = len(lines) - len(wanted)
    for fuzz, norm in _LOOSENESS:
        goal = [norm(w) for w in wanted]
        starts = [last] if at_end else range(start, last + 1)
        for i in starts:
            if i >= start and all(norm(lines[i + k]) == g for k, g in enumerate(goal)):
                return i, fuzz
    return None


def _not_found(path: str, hunk: Hunk, wanted: list[str], what: str) -> PatchError:
    shown = "\n".join(f"  |{line}" for line in wanted[:QUOTED_LINES])
    if len(wanted) > QUOTED_LINES:
        shown += f"\n  ... ({len(wanted) - QUOTED_LINES} more lines)"
    where = " at the end of the file" if hunk.at_end else ""
    after = " after the previous hunk" if hunk.number > 1 else ""
    return PatchError(
        f"{path}: hunk {hunk.number} (line {hunk.patch_line} of the patch) does not match: "
        f"{what} were not found{where}{after}:\n{shown}\n"
        "Read the file again and copy the context lines exactly (context and '-' lines must "
        "be the file's current text, in order)."
    )


__all__ = ["Applied", "apply_hunks"]
