"""The texts the bridge sends an editor: cut to their bounds, and the model's text reconciled
between what was streamed and what was stored (nothing sent twice)."""

from __future__ import annotations

import json
from typing import Any, TypeAlias

import acp
from acp.schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    ContentToolCallContent,
    FileEditToolCallContent,
    TerminalToolCallContent,
)

from bridge.schema import TextContent

Content: TypeAlias = ContentToolCallContent | FileEditToolCallContent | TerminalToolCallContent

#: Characters of one text sent to the editor (a command's output, an error) at most.
MAX_TEXT = 50_000
#: Characters of a raw input or output (JSON) sent along; larger ones are left out.
MAX_RAW = 20_000
#: Characters of streamed text kept to compare with the stored text.
MAX_STREAMED = 1_000_000
#: Characters of a title.
MAX_TITLE = 200


def cut(text: str, limit: int = MAX_TEXT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters not shown]"


def raw(value: Any) -> Any:
    """A JSON value small enough to send, else None."""
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):
        return None
    return value if len(text) <= MAX_RAW else None


def line(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first[:MAX_TITLE] + ("…" if len(first) > MAX_TITLE or "\n" in text.strip() else "")


def text_of(content: list[Any]) -> str:
    return "".join(c.text for c in content if isinstance(c, TextContent))


def grown(streamed: str, piece: str) -> str:
    """What has been streamed, kept up to MAX_STREAMED characters (past that it only counts
    as "streamed")."""
    return streamed + piece[: max(0, MAX_STREAMED - len(streamed))]


def consume(stored: str, streamed: str) -> tuple[str, str]:
    """What the editor has not seen of a stored text given what was streamed, and what stays
    streamed for the texts stored after it.

    The stream may run ahead of the stored events (the control plane relays text live, and
    events as its webhook brings them), so streamed text is taken off the front as each
    stored text comes: nothing sent twice. A stored text the stream only began is sent for
    the rest; one the stream lost pieces of (a reader that fell behind) is sent whole again,
    on a line of its own, so the transcript holds it whole at least once.
    """
    if not stored or len(streamed) >= MAX_STREAMED:
        return "", "" if stored else streamed
    if streamed.startswith(stored):
        return "", streamed[len(stored) :]
    if stored.startswith(streamed):
        return stored[len(streamed) :], ""
    return "\n\n" + stored, ""


def message(text: str) -> AgentMessageChunk:
    return acp.update_agent_message_text(text)


def thought(text: str) -> AgentThoughtChunk:
    return acp.update_agent_thought_text(text)


def text_content(text: str) -> list[Content]:
    return [acp.tool_content(acp.text_block(cut(text)))] if text.strip() else []
