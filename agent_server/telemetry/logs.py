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
from collections.abc import Iterator
from typing import Any

from web import logs

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


class JsonFormatter(logs.JsonFormatter):
    """`web.logs.JsonFormatter`'s line, with the conversation the record was logged for."""

    def fields(self) -> dict[str, Any]:
        return {"conversation_id": _CONVERSATION.get()}
