"""PubSub: fan-out of each conversation's events to bounded per-subscriber queues.

Publishing is synchronous and never waits for anyone: it runs inside the log's writer (after
each durable write) and inside the agent loop (streaming deltas). A subscriber whose queue
passes its limits is cut off on the spot; its socket closes with 1013 and the client resumes
with `after_id`, so neither the agent, the log nor the other subscribers ever wait for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from events import Event
from web.errors import LimitReached

#: The transient state update that is a progress frame (agent.sink.RETRY_KEY: delivery sits
#: below the agent, so it names it again).
PROGRESS_KEY = "llm_retry"


@dataclass(frozen=True, slots=True)
class Frame:
    """One event as a subscriber receives it: the JSON text exactly as events search returns it."""

    event_id: str | None
    """The stored event's id; None for what is not in the log (deltas, errors to one client)."""
    text: str
    size: int
    progress: bool = False
    """A progress frame (a running tool's output: a StreamingDeltaEvent with `output`; a model
    call's retry: the `llm_retry` state update): only for sockets that asked for them."""

    @classmethod
    def stored(cls, event_id: str, line: bytes) -> Frame:
        """A stored line (its trailing newline, if any, is not part of the event)."""
        if line.endswith(b"\n"):
            line = line[:-1]
        return cls(event_id, line.decode(), len(line))

    @classmethod
    def transient(cls, event: Event) -> Frame:
        text = event.model_dump_json()
        progress = (
            getattr(event, "output", None) is not None
            or getattr(event, "key", None) == PROGRESS_KEY
        )
        return cls(None, text, len(text), progress)


class SubscriptionState(enum.Enum):
    OPEN = "open"
    OVERFLOWED = "overflowed"
    CLOSED = "closed"


class TooManySubscribers(LimitReached):
    """The conversation already has as many subscribers as allowed."""

    def __init__(self, conversation_id: str, limit: int) -> None:
        super().__init__(f"at most {limit} subscribers")
        self.conversation_id = conversation_id
        self.limit = limit


class SubscriptionEnded(Exception):
    """`get` on a subscription that overflowed or was closed."""

    def __init__(self, state: SubscriptionState) -> None:
        super().__init__(f"subscription is {state.value}")
        self.state = state


class Subscription:
    """One subscriber's queue, bounded in events and bytes."""

    def __init__(
        self, pubsub: PubSub, conversation_id: str, max_events: int, max_bytes: int
    ) -> None:
        self.conversation_id = conversation_id
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.state = SubscriptionState.OPEN
        #: Set once the subscription overflowed or was closed.
        self.ended = asyncio.Event()
        self._pubsub = pubsub
        self._queue: deque[Frame] = deque()
        self._bytes = 0
        self._ready = asyncio.Event()
        #: Frames queued so far, and frames the socket has written (or skipped) so far.
        self.offered = 0
        self._sent = 0
        self._progress = asyncio.Event()

    def __len__(self) -> int:
        return len(self._queue)

    def offer(self, frame: Frame) -> bool:
        """Queue a published frame; past the limits the subscription overflows (False)."""
        if self.state is not SubscriptionState.OPEN:
            return False
        if self._queue and (
            len(self._queue) >= self.max_events or self._bytes + frame.size > self.max_bytes
        ):
            self._end(SubscriptionState.OVERFLOWED)
            return False
        self._push(frame)
        return True

    def put(self, frame: Frame) -> None:
        """Queue a frame for this subscriber alone (an error about its own input): no limit."""
        if self.state is SubscriptionState.OPEN:
            self._push(frame)

    def _push(self, frame: Frame) -> None:
        self._queue.append(frame)
        self._bytes += frame.size
        self.offered += 1
        self._ready.set()

    def sent(self) -> None:
        """The reader is done with the frame it took last (written to its socket, or skipped)."""
        self._sent += 1
        self._progress.set()

    async def wait_sent(self, count: int) -> None:
        """Until the first `count` frames ever queued were sent, or the subscription ended."""
        while self._sent < count and self.state is SubscriptionState.OPEN:
            self._progress.clear()
            await self._progress.wait()

    async def get(self) -> Frame:
        """The next frame, waiting for one; SubscriptionEnded once overflowed or closed."""
        while not self._queue:
            if self.state is not SubscriptionState.OPEN:
                raise SubscriptionEnded(self.state)
            self._ready.clear()
            await self._ready.wait()
        if self.state is not SubscriptionState.OPEN:
            raise SubscriptionEnded(self.state)
        frame = self._queue.popleft()
        self._bytes -= frame.size
        return frame

    def close(self) -> None:
        if self.state is SubscriptionState.OPEN:
            self._end(SubscriptionState.CLOSED)

    def send_timed_out(self) -> None:
        """Its socket did not take a frame in time: the client is cut off (counted once)."""
        self._pubsub.send_timeouts += 1

    def ping_timed_out(self) -> None:
        """Its client left a ping unanswered: the protocol closed the socket (counted once)."""
        self._pubsub.ping_timeouts += 1

    def _end(self, state: SubscriptionState) -> None:
        self.state = state
        self._queue.clear()  # nobody will read it: free the memory now
        self._bytes = 0
        self._pubsub._remove(self)
        self.ended.set()
        self._ready.set()
        self._progress.set()


class PubSub:
    """Subscribers by conversation id; `publish` fans a write out to all of them."""

    def __init__(
        self, max_subscribers: int = 100, max_events: int = 4096, max_bytes: int = 8 * 1024 * 1024
    ) -> None:
        self.max_subscribers = max_subscribers
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._subs: dict[str, list[Subscription]] = {}
        #: Subscribers cut off because they fell behind, since start: their queue overflowed
        #: (here), or a frame waited too long for their socket (noted by the socket).
        self.overflows = 0
        self.send_timeouts = 0
        self.ping_timeouts = 0

    def subscribe(self, conversation_id: str) -> Subscription:
        subs = self._subs.setdefault(conversation_id, [])
        if len(subs) >= self.max_subscribers:
            raise TooManySubscribers(conversation_id, self.max_subscribers)
        sub = Subscription(self, conversation_id, self.max_events, self.max_bytes)
        subs.append(sub)
        return sub

    def has_subscribers(self, conversation_id: str) -> bool:
        return bool(self._subs.get(conversation_id))

    def count(self, conversation_id: str | None = None) -> int:
        if conversation_id is not None:
            return len(self._subs.get(conversation_id, ()))
        return sum(len(subs) for subs in self._subs.values())

    def publish(self, conversation_id: str, frames: Sequence[Frame]) -> None:
        """Queue `frames` for every subscriber of the conversation; never waits."""
        for sub in list(self._subs.get(conversation_id, ())):
            for frame in frames:
                if not sub.offer(frame):
                    if sub.state is SubscriptionState.OVERFLOWED:
                        self.overflows += 1
                    break

    async def delivered(self, conversation_id: str, timeout: float) -> None:
        """Until every subscriber's socket has been written what was published so far, for at
        most `timeout` seconds (a stalled client delays the caller that long, never more)."""
        waits = [sub.wait_sent(sub.offered) for sub in self._subs.get(conversation_id, ())]
        if waits:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await asyncio.gather(*waits)

    def close_all(self) -> None:
        for subs in list(self._subs.values()):
            for sub in list(subs):
                sub.close()

    def _remove(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.conversation_id)
        if subs is not None and sub in subs:
            subs.remove(sub)
            if not subs:
                del self._subs[sub.conversation_id]


__all__ = [
    "Frame",
    "PubSub",
    "Subscription",
    "SubscriptionEnded",
    "SubscriptionState",
    "TooManySubscribers",
]
