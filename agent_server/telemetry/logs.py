"""Structured logs (`--log-format json`): one JSON object per line.

    {"time": "2025-01-01T00:00:00.123Z", "level": "INFO", "logger": "agent_server.access",
     "message": "GET /api/conversations 200 1.2ms", "conversation_id": "…", "trace_id": "…",
     "span_id": "…"}

`conversation_id` is the conversation the record was logged for (a run, or a request naming
one), `trace_id` and `span_id` the current span's (a request's, a run's; with tracing off,
the caller's `traceparent`), each null when there is none. The object is written with every
non-ASCII and control character escaped, so client text inside a message can neither start
a line of its own nor reach a terminal; a traceback is one field (`exception`), not lines.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

_CONVERSATION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "log_conversation_id", default=None
)


def set_conversation(conversation_id: str | None) -> None:
    """Records logged from here on in this context (a request, a run task) name it."""
    _CONVERSATION.set(conversation_id)


@contextlib.contextmanager
def conversation(conversation_id: str | None) -> Iterator[None]:
    token = _CONVERSATION.set(conversation_id)
    try:
        yield
    finally:
        _CONVERSATION.reset(token)


def current_conversation() -> str | None:
    return _CONVERSATION.get()


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        span = trace.get_current_span().get_span_context()
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "conversation_id": _CONVERSATION.get(),
            "trace_id": format(span.trace_id, "032x") if span.is_valid else None,
            "span_id": format(span.span_id, "016x") if span.is_valid else None,
        }
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        return json.dumps(data, ensure_ascii=True, default=str)
