"""EventSink: where a conversation's agent writes, with secrets masked in one place.

Stored events are masked by the log as they are written (the log's redactor is this sink's
masker); transient events (streaming deltas) never reach the log, so they are masked here, a
secret split between two deltas included. Nothing else masks events.

Transient events get an id and a time here (the log gives stored ones theirs): clients such as
the OpenHands SDK require both on every frame. Their ids are never in the log.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from agent_server.log import EventLog
from core.ids import new_event_id
from core.masking import Masker
from events import ConversationStateUpdateEvent, Event, StreamingDeltaEvent, format_timestamp


def transient(event: Event) -> Event:
    """`event` with the id and time a frame needs (it is never stored, so the log gives none)."""
    if event.id is None:
        event.id = new_event_id()
    if event.timestamp is None:
        event.timestamp = format_timestamp(datetime.now(UTC))
    return event


class EventSink:
    def __init__(
        self,
        open_log: Callable[[], Awaitable[EventLog]],
        publish: Callable[[Event], None],
        masker: Masker,
    ) -> None:
        self._open_log = open_log
        self._publish = publish
        self.masker = masker

    async def log(self) -> EventLog:
        return await self._open_log()

    async def append(self, *events: Event) -> list[Event]:
        """Durably stored (masked) before this returns; subscribers see them after."""
        return await (await self._open_log()).append(*events)

    def publish_transient(self, event: Event) -> None:
        """Live subscribers only: never stored, never pushed to the webhook."""
        if self.masker:
            event = type(event).model_validate(self.masker.data(event.model_dump(mode="json")))
        self._publish(transient(event))

    def deltas(self) -> DeltaStream:
        return DeltaStream(self)

    def retry_notice(self, error: str, wait: float) -> None:
        """The model call failed with `error` and is tried again in `wait` seconds: a transient
        `llm_retry` state update (for sockets that ask for progress frames)."""
        self.publish_transient(
            ConversationStateUpdateEvent(
                key=RETRY_KEY, value={"error": error, "retry_in": round(wait, 1)}
            )
        )

    def live_output(self, tool_call_id: str) -> Callable[[str], None]:
        """Where one tool call's output goes as it comes (tools.base.LIVE_OUTPUT)."""
        return OutputStream(self, tool_call_id)


#: The key of the transient state update saying a model call is retried.
RETRY_KEY = "llm_retry"

#: Characters of one call's output sent live; the rest shows with its observation.
MAX_LIVE_OUTPUT = 64 * 1024


class OutputStream:
    """A running tool's output as transient deltas (`tool_call_id`, `output`), masked, up to
    MAX_LIVE_OUTPUT characters: never stored, so the observation holds it once."""

    def __init__(self, sink: EventSink, tool_call_id: str) -> None:
        self._sink = sink
        self._tool_call_id = tool_call_id
        self._left = MAX_LIVE_OUTPUT

    def __call__(self, text: str) -> None:
        if self._left <= 0 or not text:
            return
        text = text[: self._left]
        self._left -= len(text)
        self._sink.publish_transient(
            StreamingDeltaEvent(tool_call_id=self._tool_call_id, output=text)
        )


class DeltaStream:
    """The streamed pieces of one model response, masked as they go: an ending that may be
    the start of a secret waits for the next piece to show whether it is."""

    def __init__(self, sink: EventSink) -> None:
        self._publish = sink._publish
        self._text = sink.masker.stream()
        self._reasoning = sink.masker.stream()

    def feed(self, text: str | None, reasoning: str | None) -> None:
        self._send(
            self._text.feed(text) if text else None,
            self._reasoning.feed(reasoning) if reasoning else None,
        )

    def flush(self) -> None:
        self._send(self._text.flush() or None, self._reasoning.flush() or None)

    def _send(self, text: str | None, reasoning: str | None) -> None:
        if text or reasoning:
            self._publish(transient(StreamingDeltaEvent(content=text, reasoning_content=reasoning)))
