"""Text between the conversation and an ACP agent: user messages as prompt blocks, and the
agent's message chunks assembled into one MessageEvent per message.

The agent streams a message as chunks of text and of thought: each is shown live at once (a
StreamingDeltaEvent, masked on its way by the sink) and kept, up to MAX_MESSAGE_CHARS, for the
MessageEvent stored when the message ends (a tool call starts, the turn ends).
"""

from __future__ import annotations

from typing import Any

import acp
from acp.schema import ResourceContentBlock, TextContentBlock

from agent_server.agent.sink import DeltaStream, EventSink
from agent_server.log import Query
from events import Event, ImageContent, Message, MessageEvent, TextContent, parse_event

#: The text of one agent message is kept up to this many characters.
MAX_MESSAGE_CHARS = 200_000
#: User messages sent in one prompt at most (older unsent ones are left out).
MAX_PROMPT_MESSAGES = 50

PromptBlock = TextContentBlock | ResourceContentBlock


def chunk_text(block: Any) -> str:
    """The text of a message chunk's content block (other kinds carry none)."""
    return block.text if isinstance(block, TextContentBlock) else ""


async def unsent(sink: EventSink, prompted: str | None) -> list[MessageEvent]:
    """The user's messages on the current branch after `prompted`, the last one sent to the
    agent (at most MAX_PROMPT_MESSAGES: the rest go in the next prompt)."""
    log = await sink.log()
    await log.drain()
    query = Query(kind="MessageEvent", source="user", branch=log.head)
    lines, _ = log.search(query, MAX_PROMPT_MESSAGES + 1, page_id=prompted)
    out: list[MessageEvent] = []
    for line in lines:
        event = parse_event(line)
        if isinstance(event, MessageEvent) and (prompted is None or (event.id or "") > prompted):
            out.append(event)
    return out[:MAX_PROMPT_MESSAGES]


def prompt_blocks(message: MessageEvent) -> list[PromptBlock]:
    """A user message as ACP content: its text, its images as links, its extended content."""
    out: list[PromptBlock] = []
    for item in message.llm_message.content:
        if isinstance(item, TextContent):
            out.append(acp.text_block(item.text))
        elif isinstance(item, ImageContent):
            for url in item.image_urls:
                out.append(acp.resource_link_block(name="image", uri=url))
    for extra in message.extended_content:
        out.append(acp.text_block(extra.text))
    return out


class AgentMessage:
    """The agent's message under way, from its chunks."""

    def __init__(self, sink: EventSink) -> None:
        self._sink = sink
        self._text: list[str] = []
        self._thoughts: list[str] = []
        self._chars = 0
        self._deltas: DeltaStream | None = None

    @property
    def started(self) -> bool:
        """Some text of it (not only thoughts) has arrived."""
        return bool(self._text)

    def add(self, text: str, thought: bool) -> None:
        if self._chars < MAX_MESSAGE_CHARS:
            piece = text[: MAX_MESSAGE_CHARS - self._chars]
            (self._thoughts if thought else self._text).append(piece)
            self._chars += len(piece)
        if self._deltas is None:
            self._deltas = self._sink.deltas()
        self._deltas.feed(None if thought else text, text if thought else None)

    def end(self) -> list[Event]:
        """The message so far as one MessageEvent (none when it said nothing); the next chunk
        starts a new one."""
        if self._deltas is not None:
            self._deltas.flush()
            self._deltas = None
        text, thoughts = "".join(self._text), "".join(self._thoughts)
        cut = self._chars >= MAX_MESSAGE_CHARS
        self._text, self._thoughts, self._chars = [], [], 0
        if not text and not thoughts:
            return []
        if cut:
            text += "\n[... the rest of this message was cut]"
        return [
            MessageEvent(
                source="agent",
                llm_message=Message(
                    role="assistant",
                    content=[TextContent(text=text)],
                    reasoning_content=thoughts or None,
                ),
            )
        ]
