"""What file_editor shows of files and directories: lines numbered as `cat -n` prints them,
view ranges, a file too big to load read a line at a time, and a two-level listing.

Every output is clipped to tools.files.MAX_OUTPUT_CHARS; a bad range is a Refusal.
"""

from __future__ import annotations

import os
from pathlib import Path

from tools.files import MAX_OUTPUT_CHARS, Refusal, clip

#: Bytes of one line read at a time when a big file is viewed in parts.
LINE_BYTES = 4 * 30_000
#: A directory view stops after this many entries (a node_modules can hold 100,000).
MAX_LISTING_ENTRIES = 1_000


def split_lines(text: str) -> tuple[list[str], bool]:
    """Lines of a text and whether it ends with a newline (an empty file counts as one that
    does, so text inserted into it ends with a newline)."""
    if text == "":
        return [], True
    lines = text.split("\n")
    trailing_newline = text.endswith("\n")
    if trailing_newline:
        lines.pop()
    return lines, trailing_newline


def find_all(text: str, needle: str, limit: int) -> list[int]:
    """Start offsets of needle in text, at most limit + 1 of them."""
    starts: list[int] = []
    at = text.find(needle)
    while at != -1 and len(starts) <= limit:
        starts.append(at)
        at = text.find(needle, at + 1)
    return starts


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def numbered(lines: list[str], start: int, end: int) -> str:
    """Lines start..end (1-based, inclusive) as `cat -n` prints them."""
    return "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(start, min(end, len(lines)) + 1))


def parse_range(view_range: list[int] | None) -> tuple[int, int]:
    """(start, end) of a view_range, checked for shape only; end -1 means to the end."""
    if view_range is None:
        return 1, -1
    if len(view_range) != 2:
        raise Refusal(f"view_range must be two numbers [start, end]; got {view_range}.")
    start, end = view_range
    if start < 1:
        raise Refusal(f"view_range start {start} is invalid: lines are numbered from 1.")
    if end != -1 and end < start:
        raise Refusal(
            f"view_range {view_range} is invalid: end {end} is before start {start} "
            "(use -1 as end to read to the end of the file)."
        )
    return start, end


def view_text(text: str, view_range: list[int] | None) -> str:
    start, end = parse_range(view_range)
    lines, _ = split_lines(text)
    if not lines:
        if view_range is not None:
            raise Refusal("view_range cannot apply: the file is empty.")
        return "(the file is empty)"
    if start > len(lines):
        raise Refusal(
            f"view_range start {start} is beyond the end of the file, which has {len(lines)} lines."
        )
    note = ""
    if end > len(lines):
        note = f"\n(the file ends at line {len(lines)})"
    last = len(lines) if end == -1 else min(end, len(lines))
    return clip(numbered(lines, start, last) + note)


def numbered_stream(path: Path, start: int, end: int) -> str:
    """Lines start..end of a file too big to load, read one at a time until the output cap."""
    out: list[str] = []
    chars = 0
    number = 0
    with path.open("rb") as f:
        while True:
            # A line is read in bounded pieces: a huge file may be one huge line.
            raw = f.readline(LINE_BYTES)
            if not raw:
                break
            number += 1
            cut = not raw.endswith(b"\n")
            while cut and (more := f.readline(LINE_BYTES)):  # skip the rest of a long line
                cut = not more.endswith(b"\n")
            if number < start:
                continue
            if (end != -1 and number > end) or chars > MAX_OUTPUT_CHARS:
                break
            line = raw.decode("utf-8", errors="replace").removesuffix("\n").removesuffix("\r")
            if not raw.endswith(b"\n") and len(raw) == LINE_BYTES:
                line += " [... rest of this long line not shown]"
            out.append(f"{number:6}\t{line}")
            chars += len(out[-1]) + 1
    if not out:
        raise Refusal(
            f"view_range start {start} is beyond the end of the file, which has {number} lines."
        )
    return clip("\n".join(out))


def list_dir(root: Path) -> str:
    """Files and directories two levels under root, hidden ones (and their contents) left
    out; symlinked directories are shown but not entered."""
    entries: list[str] = []
    truncated = False

    def walk(directory: Path, depth: int) -> None:
        nonlocal truncated
        try:
            with os.scandir(directory) as it:
                visible = [e for e in it if not e.name.startswith(".")]
            children = sorted(visible, key=lambda e: e.name)
        except OSError as e:
            entries.append(f"{directory}/  [cannot list: {e.strerror}]")
            return
        for child in children:
            if len(entries) >= MAX_LISTING_ENTRIES:
                truncated = True
                return
            is_dir = child.is_dir(follow_symlinks=False)
            entries.append(f"{child.path}/" if is_dir else child.path)
            if is_dir and depth < 2:
                walk(Path(child.path), depth + 1)

    walk(root, 1)
    body = "\n".join(entries) if entries else "(empty directory)"
    if truncated:
        body += f"\n<listing stopped at {MAX_LISTING_ENTRIES} entries; view subdirectories>"
    return clip(
        f"Here's the files and directories up to 2 levels deep in {root}, excluding hidden "
        f"items:\n{body}"
    )
