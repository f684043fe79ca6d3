"""Streaming text for the live relay: one websocket per followed conversation.

StreamingDeltaEvents (a conversation created with `llm.stream`) are never stored nor pushed to
the webhook: the agent server sends them only on its socket `/sockets/events/{id}`, as transient
frames. While at least one browser follows a conversation (`relay`) and its sandbox is RUNNING,
the hub holds ONE socket to that sandbox's agent server (live only, no replay; the session key
in the `X-Session-API-Key` header, so the browser never sees it) and offers each delta to every
follower's bounded queue, ringing the follower's own bell flag. Everything else on the socket is
ignored: stored events reach the browser from the store, as before.

Bounded: the socket's reader only appends to queues, so a slow browser never holds up the socket
or another browser; a follower whose queue is full loses deltas (the final MessageEvent replaces
the streamed text anyway), never a stored event. The socket is closed when the last follower
leaves or the sandbox is no longer RUNNING (looked at every `poll` seconds), and opened again
with backoff after a drop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Iterator
from typing import Final

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from control_plane.agent_client import HEADER
from control_plane.models import SandboxStatus
from control_plane.sandboxes.service import SandboxService
from control_plane.store import Database, conversations
from core.retry import Backoff, Clock

logger = logging.getLogger(__name__)

#: Deltas a follower may have waiting; more are dropped for it.
QUEUE = 256
#: The largest frame taken from an agent server (stored events come on the socket too).
FRAME_LIMIT = 16 * 1024 * 1024
KIND: Final = "StreamingDeltaEvent"
#: The transient state update saying the model call is retried (relayed like a delta).
RETRY: Final = "llm_retry"


class Follower:
    """One relay's queue of deltas (each one line of JSON), bounded."""

    def __init__(self, wake: asyncio.Event, limit: int) -> None:
        self._queue: deque[str] = deque()
        self._wake = wake
        self._limit = limit
        self.dropped = 0

    def offer(self, line: str) -> None:
        if len(self._queue) >= self._limit:
            self.dropped += 1
            return
        self._queue.append(line)
        self._wake.set()

    def drain(self) -> list[str]:
        lines = list(self._queue)
        self._queue.clear()
        return lines


class _Gone:
    """The conversation was deleted: nothing more to follow."""


GONE: Final = _Gone()


def delta_line(text: str) -> str | None:
    """The frame as one line of JSON when it is a StreamingDeltaEvent (the model's text, a
    running tool's output) or a model call's retry notice (`llm_retry`), else None."""
    if KIND not in text and RETRY not in text:  # most frames: not parsed at all
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    retry = data.get("kind") == "ConversationStateUpdateEvent" and data.get("key") == RETRY
    if data.get("kind") != KIND and not retry:
        return None
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def socket_url(base: str, conversation_id: str) -> str:
    scheme, sep, rest = base.partition("://")
    ws = {"http": "ws", "https": "wss"}.get(scheme, scheme)
    return f"{ws}{sep}{rest.rstrip('/')}/sockets/events/{conversation_id}"


class DeltaHub:
    def __init__(
        self,
        db: Database,
        sandboxes_: SandboxService,
        *,
        poll: float = 2.0,
        queue: int = QUEUE,
        backoff: Backoff | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.db = db
        self.sandboxes = sandboxes_
        self.poll = poll
        self.queue = queue
        self.backoff = backoff or Backoff(minimum=0.25, maximum=15.0)
        self.clock = clock or Clock()
        self._followers: dict[str, set[Follower]] = {}
        self._holders: dict[str, asyncio.Task[None]] = {}
        #: Conversations whose socket is open now.
        self.connected: set[str] = set()
        self.closed = False

    @contextlib.contextmanager
    def follow(self, conversation_id: str, wake: asyncio.Event) -> Iterator[Follower]:
        """A follower of the conversation's deltas while the block runs (`wake` is set with
        each one); the first follower opens the socket, the last one to leave closes it."""
        follower = Follower(wake, self.queue)
        followers = self._followers.setdefault(conversation_id, set())
        followers.add(follower)
        if conversation_id not in self._holders and not self.closed:
            holder = asyncio.create_task(
                self._hold(conversation_id), name=f"deltas of {conversation_id}"
            )
            self._holders[conversation_id] = holder
            holder.add_done_callback(lambda done: self._ended(conversation_id, done))
        try:
            yield follower
        finally:
            followers.discard(follower)
            if not followers:
                self._followers.pop(conversation_id, None)
                ending = self._holders.pop(conversation_id, None)
                if ending is not None:
                    ending.cancel()

    def _ended(self, conversation_id: str, holder: asyncio.Task[None]) -> None:
        if self._holders.get(conversation_id) is holder:
            del self._holders[conversation_id]
        if not holder.cancelled() and holder.exception() is not None:
            logger.error("the deltas of %s stopped", conversation_id, exc_info=holder.exception())

    async def _target(self, conversation_id: str) -> tuple[str, str, str] | _Gone | None:
        """(sandbox id, socket URL, session key) when its sandbox is RUNNING; GONE; else None."""
        conversation = await conversations.get(self.db, conversation_id)
        if conversation is None:
            return GONE
        row = await self.sandboxes.rows.get(conversation.sandbox_id)
        if row is None or row.status is not SandboxStatus.RUNNING:
            return None
        url = self.sandboxes.url(row)
        if url is None:
            return None
        # With running tools' output: the console shows a command's lines as they come.
        return (
            row.id,
            socket_url(url, conversation_id) + "?progress=true",
            self.sandboxes.session_key(row),
        )

    async def _hold(self, conversation_id: str) -> None:
        failures = 0
        while True:
            target = await self._target(conversation_id)
            if isinstance(target, _Gone):
                return
            if target is None:  # not RUNNING (yet, or any more): look again later
                await self.clock.sleep(self.poll)
                continue
            try:
                if await self._connected(conversation_id, *target):
                    failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # refused, dropped, unreachable: the same backoff
                logger.debug("the socket of %s: %s: %s", conversation_id, type(exc).__name__, exc)
            finally:
                self.connected.discard(conversation_id)
            failures += 1
            await self.clock.sleep(self.backoff.delay(failures))

    async def _connected(self, conversation_id: str, sandbox_id: str, url: str, key: str) -> bool:
        """One socket, until it drops or the sandbox stops; True once it was subscribed (its
        first frame came), so that a socket refused after the handshake still backs off."""
        subscribed = False
        async with connect(
            url,
            additional_headers={HEADER: key},
            open_timeout=10,
            close_timeout=2,
            max_size=FRAME_LIMIT,
        ) as socket:
            self.connected.add(conversation_id)
            loop = asyncio.get_running_loop()
            check = loop.time() + self.poll
            while True:
                try:
                    frame = await asyncio.wait_for(socket.recv(), max(0.0, check - loop.time()))
                except ConnectionClosed:
                    return subscribed
                except TimeoutError:
                    target = await self._target(conversation_id)
                    if not isinstance(target, tuple) or target[:2] != (sandbox_id, url):
                        return subscribed  # stopped, paused, deleted: the socket closes
                    check = loop.time() + self.poll
                    continue
                subscribed = True
                if isinstance(frame, str) and (line := delta_line(frame)) is not None:
                    for follower in list(self._followers.get(conversation_id, ())):
                        follower.offer(line)

    async def close(self) -> None:
        self.closed = True
        holders = list(self._holders.values())
        for holder in holders:
            holder.cancel()
        if holders:
            await asyncio.wait(holders, timeout=5)
