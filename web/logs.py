"""Log records a client cannot forge: whatever a client sent (a path, a header, a detail quoting
its input) is logged with its control characters escaped, so `%0A` in a path cannot start a
forged line and `%1B` cannot reach a terminal: `escape` for one value, `SafeFormatter` for
every record of a service, `JsonFormatter` for one JSON object per line (`--log-format json`):

    {"time": "2025-01-01T00:00:00.123Z", "level": "INFO", "logger": "control_plane.access",
     "message": "...", "trace_id": "…", "span_id": "…", ...the service's own fields}

`trace_id` and `span_id` are the current span's (a request's, a job's; with tracing off, the
caller's `traceparent`), null when there is none: a request's log lines and its trace share
the id. The object is written with every non-ASCII and control character escaped, so client
text inside a message can neither start a line of its own nor reach a terminal; a traceback is
one field (`exception`), not lines."""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

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


class JsonFormatter(logging.Formatter):
    def fields(self) -> dict[str, Any]:
        """What a service adds to every line (the agent server: the conversation)."""
        return {}

    def format(self, record: logging.LogRecord) -> str:
        span = trace.get_current_span().get_span_context()
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **self.fields(),
            "trace_id": format(span.trace_id, "032x") if span.is_valid else None,
            "span_id": format(span.span_id, "016x") if span.is_valid else None,
        }
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        return json.dumps(data, ensure_ascii=True, default=str)
