"""Glob patterns (those of `glob`, grep's `include` and .gitignore lines) as regular expressions.

One translation for every path matcher here, so the Python fallback agrees with ripgrep's
globs: `*` and `?` stay inside one path segment, `**` spans segments, `{a,b}` is either, and
a pattern without a slash matches a file's name at any depth.
"""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=256)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """A regex matching the relative paths (with `/`) that `pattern` names."""
    pattern = pattern.strip()
    while pattern.startswith("./"):
        pattern = pattern[2:]
    anchored = "/" in pattern.rstrip("/")
    pattern = pattern.strip("/")
    body = _translate(pattern)
    return re.compile(body if anchored else f"(?:.*/)?{body}", re.DOTALL)


def matches(pattern: str, path: str) -> bool:
    return compile_glob(pattern).fullmatch(path) is not None


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i) and (i == 0 or pattern[i - 1] == "/"):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i) and i + 2 == n and (i == 0 or pattern[i - 1] == "/"):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 2)
            if end == -1:
                out.append(re.escape(c))
                i += 1
                continue
            inner = pattern[i + 1 : end]
            if inner[0] in "!^":
                inner = "^" + inner[1:]
            out.append("[" + inner.replace("\\", "\\\\") + "]")
            i = end + 1
        elif c == "{":
            end = _closing_brace(pattern, i)
            if end == -1:
                out.append(re.escape(c))
                i += 1
                continue
            options = _split_options(pattern[i + 1 : end])
            out.append("(?:" + "|".join(_translate(o) for o in options) + ")")
            i = end + 1
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _closing_brace(pattern: str, start: int) -> int:
    depth = 0
    for i in range(start, len(pattern)):
        if pattern[i] == "{":
            depth += 1
        elif pattern[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _split_options(inner: str) -> list[str]:
    options, depth, current = [], 0, ""
    for c in inner:
        if c == "," and depth == 0:
            options.append(current)
            current = ""
            continue
        depth += (c == "{") - (c == "}")
        current += c
    options.append(current)
    return options


__all__ = ["compile_glob", "matches"]
