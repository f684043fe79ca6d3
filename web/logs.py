"""Log records a client cannot forge: whatever a client sent (a path, a header, a detail quoting
its input) is logged with its control characters escaped, so `%0A` in a path cannot start a
forged line and `%1B` cannot reach a terminal: `escape` for one value, `SafeFormatter` for
every record of a service."""

from __future__ import annotations

import logging
import re
from typing import Any

# C0, DEL, C1, and the Unicode line and paragraph separators (some viewers break lines there).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (
        f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
    )


def escape(text: str) -> str:
    """`text` on one line, its control characters written as Python escapes (`\\n`, `\\x1b`)."""
    return _CONTROL.sub(_escaped, text)


class SafeFormatter(logging.Formatter):
    """Each record's message on one line, control characters escaped; a traceback keeps its
    lines, each indented, so no continuation can pass for a record of its own."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indented(super().formatStack(stack_info))


def _indented(text: str) -> str:
    return "\n".join("    " + escape(line) for line in text.splitlines())
