"""The live relay of a conversation's events to a browser (server-sent events).

The store is the only source: the webhook stores a batch, then rings the conversation's bell,
and every relay of that conversation reads what was stored after the last event it sent. So a
relay never misses or reorders an event, a slow reader holds up nobody (ringing only sets a
flag), and a reader that reconnects with the last id it saw (`Last-Event-ID`) resumes exactly
there. A relay also looks again every `poll` seconds, so events stored by another control-plane
process behind the same database arrive too, only later.

Streaming text is the one thing not from the store: with a `DeltaHub`, the relay follows the
conversation's deltas too (rung on the same flag) and sends each as an `event: delta` frame with
no id, so the ids a reader resumes from stay stored events' ids (`control_plane.deltas`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from control_plane.deltas import DeltaHub, Follower
from control_plane.store import Database, events

#: Events read from the store at a time.
CHUNK = 200


class Bell:
    """Per conversation, the relays waiting for its next events."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Event]] = {}
        self.closed = False

    def ring(self, conversation_id: str) -> None:
        for flag in self._waiting.get(conversation_id, ()):
            flag.set()

    @contextlib.contextmanager
    def listen(self, conversation_id: str) -> Iterator[asyncio.Event]:
        flag = asyncio.Event()
        self._waiting.setdefault(conversation_id, set()).add(flag)
        try:
            yield flag
        finally:
            waiting = self._waiting.get(conversation_id)
            if waiting is not None:
                waiting.discard(flag)
                if not waiting:
                    del self._waiting[conversation_id]

    def close(self) -> None:
        """Ends every relay (shutdown): open streams would otherwise hold the server up."""
        self.closed = True
        for flags in self._waiting.values():
            for flag in flags:
                flag.set()


#: What ends a line of the event-stream format (a field holding one would start another).
_BREAKS = re.compile(r"\r\n|\r|\n")


def _data(text: str) -> str:
    """`text` as data lines: whatever it holds, a reader gets it back and no other field."""
    return "".join(f"data: {line}\n" for line in _BREAKS.split(text))


def frame(event_id: str, body: str) -> bytes:
    # Ids are checked at ingest (`webhook.STORED_ID`); one that could break its line anyway
    # (stored before that check) is left out rather than written.
    head = "" if _BREAKS.search(event_id) or "\0" in event_id else f"id: {event_id}\n"
    return f"{head}{_data(body)}\n".encode()


def delta_frame(line: str) -> bytes:
    # No id: a reader resumes after stored events only.
    return f"event: delta\n{_data(line)}\n".encode()


@contextlib.contextmanager
def _deltas(
    hub: DeltaHub | None, conversation_id: str, woken: asyncio.Event
) -> Iterator[Follower | None]:
    if hub is None:
        yield None
    else:
        with hub.follow(conversation_id, woken) as follower:
            yield follower


async def relay(
    db: Database,
    bell: Bell,
    conversation_id: str,
    after: int,
    still_there: Callable[[], Awaitable[bool]],
    *,
    deltas: DeltaHub | None = None,
    poll: float = 15.0,
) -> AsyncIterator[bytes]:
    """SSE frames of the events stored after position `after`, then of each new one, until the
    conversation is deleted (an `event: gone` frame) or the server shuts down; with `deltas`,
    the streaming text as it comes (`event: delta`)."""
    yield b"retry: 2000\n\n"
    with bell.listen(conversation_id) as woken, _deltas(deltas, conversation_id, woken) as follower:
        while not bell.closed:
            woken.clear()  # before reading: a ring during the read is not lost
            if follower is not None:
                for line in follower.drain():
                    yield delta_frame(line)
            found = await events.after(db, conversation_id, after, CHUNK)
            for seq, event_id, body in found:
                yield frame(event_id, body)
                after = seq
            if len(found) == CHUNK:
                continue
            try:
                await asyncio.wait_for(woken.wait(), timeout=poll)
            except TimeoutError:
                if not await still_there():
                    yield b"event: gone\ndata: {}\n\n"
                    return
                yield b": keep-alive\n\n"
