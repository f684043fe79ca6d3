"""Webhook push (SPEC 4.5): every stored event of a conversation POSTed, in order, to the control
plane.

Delivery is driven from the durable log, never from memory. Each conversation has a cursor
file (`webhook.json` in its directory: the id of the last event the receiver acknowledged)
and one Pusher that reads the log from there, posts one batch at a time (so order holds) and
moves the cursor on a 2xx. A crash between a 2xx and the cursor's save repeats that batch:
delivery is at least once, and receivers dedupe by event id. Nothing is ever dropped: failed
batches are retried for ever and the lag is reported instead (`WebhookStatus`).

Retries: 408, 429, 5xx and network errors back off exponentially with jitter (`Backoff`,
about 1 s to 60 s) unless the receiver says Retry-After; any other 4xx means the receiver
refuses the batch: it is kept, the answer logged, and tried again at the longest delay.

The HTTP side (client, signature, the receiver's answer) is in `delivery/http.py`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agent_server.delivery.http import WebhookClient, WebhookUnreachable
from agent_server.log import LOG_FILE_NAME, EventLog, last_logged_id
from agent_server.record import WebhookStatus, WebhookTotals
from core.files import read_json, write_atomic
from core.retry import Backoff, Clock
from events import Event

logger = logging.getLogger(__name__)

CURSOR_FILE = "webhook.json"


class _Gone(Exception):
    """The conversation was deleted: its pusher stops."""


# -- cursor files ---------------------------------------------------------------------------------


def read_cursor(directory: Path) -> str | None:
    """The last acknowledged event id; None when there is none (or the file is unreadable:
    everything is then sent again, which at-least-once allows)."""
    try:
        value = read_json(directory / CURSOR_FILE).get("delivered_through")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def write_cursor(directory: Path, event_id: str) -> None:
    """Replace the cursor file atomically. The directory is never made again: a deleted
    conversation's cursor must not bring its directory back."""
    write_atomic(
        directory / CURSOR_FILE, json.dumps({"delivered_through": event_id}).encode(), parents=False
    )


def needs_push(directory: Path) -> bool:
    """Whether the log holds events after the cursor (cheap: one small file and a log tail)."""
    last = last_logged_id(directory / LOG_FILE_NAME)
    if last is None:
        return False
    cursor = read_cursor(directory)
    return cursor is None or last == "" or last > cursor


# -- the pusher of one conversation ---------------------------------------------------------------


@dataclass
class Batch:
    first_id: str
    last_id: str
    lines: list[bytes]

    @property
    def body(self) -> bytes:
        return b"[" + b",".join(self.lines) + b"]"

    @property
    def message_id(self) -> str:
        # The same batch keeps its id across retries, so receivers can spot a repeat.
        return f"msg_{self.first_id}_{self.last_id}"

    def __len__(self) -> int:
        return len(self.lines)


class Pusher:
    """Pushes one conversation's log to the webhook, from its cursor on, one batch at a time."""

    def __init__(
        self, webhook: Webhook, conversation_id: str, directory: Path, alive: Callable[[], bool]
    ) -> None:
        self.webhook = webhook
        self.conversation_id = conversation_id
        self.directory = directory
        self.alive = alive
        self.status = WebhookStatus(delivered_through=read_cursor(directory))
        self.log: EventLog | None = None
        self.failures = 0
        self._cursor = self.status.delivered_through
        #: When the oldest event not acknowledged yet was appended, as far as this process
        #: saw it (monotonic; None: nothing waits). The webhook's lag in seconds.
        self.waiting_since: float | None = None
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._linger_from: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe: Callable[[], None] | None = None

    @property
    def settled(self) -> bool:
        """Nothing left to send, or failing (a flush at shutdown does not wait for it)."""
        return self.log is None or self._idle.is_set() or self.failures > 0

    def attach(self, log: EventLog) -> None:
        """Start (or continue, on a reopened log) pushing what this log holds."""
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.log = log
        self._unsubscribe = log.subscribe(self._on_events)
        self.status.pending = len(log) - self._position()
        if self.status.pending > 0 and self.waiting_since is None:
            self.waiting_since = self.webhook.clock.monotonic()  # left by an earlier run
        self._idle.clear()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"webhook {self.conversation_id}")

    def _on_events(self, written: Sequence[tuple[Event, bytes]]) -> None:
        # Runs inside the log's writer: count and wake, nothing more.
        if self.waiting_since is None:
            self.waiting_since = self.webhook.clock.monotonic()
        self.status.pending += len(written)
        if self._linger_from is None:
            self._linger_from = self.webhook.clock.monotonic()
        self._idle.clear()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _position(self) -> int:
        assert self.log is not None
        return 0 if self._cursor is None else self.log.position_after(self._cursor)

    async def _run(self) -> None:
        while True:
            try:
                while True:
                    await self._deliver(await self._next_batch())
            except asyncio.CancelledError:
                raise
            except _Gone:
                self.webhook._forget(self)
                return
            except Exception:  # a bug must not end delivery for good: log it and go on later
                logger.exception("webhook pusher of %s failed", self.conversation_id)
                await self.webhook.clock.sleep(self.webhook.backoff.maximum)

    async def _next_batch(self) -> Batch:
        limit, linger = self.webhook.batch_events, self.webhook.batch_seconds
        while True:
            if not self.alive():
                raise _Gone
            log = self.log
            assert log is not None
            start = self._position()
            available = len(log) - start
            self.status.pending = max(available, 0)
            if available <= 0:
                self._linger_from = None
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            if available < limit and not self.webhook.flushing and self._linger_from is not None:
                # A few events: wait up to `linger` for more, so they go as one batch.
                wait = self._linger_from + linger - self.webhook.clock.monotonic()
                if wait > 0:
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), wait)
                    except TimeoutError:
                        self._linger_from = None
                    continue
            lines = log.lines_after(start, limit, self.webhook.batch_bytes)
            self._linger_from = None
            return Batch(log.id_at(start), log.id_at(start + len(lines) - 1), lines)

    async def _deliver(self, batch: Batch) -> None:
        webhook = self.webhook
        while True:
            if not self.alive():
                raise _Gone
            self.status.last_attempt = datetime.fromtimestamp(webhook.clock.time(), UTC)
            try:
                async with webhook.slots:
                    reply = await webhook.client.post(
                        self.conversation_id, batch.body, batch.message_id
                    )
            except WebhookUnreachable as exc:
                self.failures += 1
                delay = webhook.backoff.delay(self.failures)
                self._failed(f"unreachable: {exc}", delay)
            else:
                if reply.ok:
                    await self._acknowledge(batch)
                    return
                self.failures += 1
                detail = f"HTTP {reply.status}: {reply.text.strip()[:500]}"
                if reply.status == 413 and len(batch) > 1:
                    half = len(batch) // 2
                    assert self.log is not None
                    batch = Batch(
                        batch.first_id,
                        self.log.id_at(self._position() + half - 1),
                        batch.lines[:half],
                    )
                    self._failed(detail + f" (retrying with {half} events)", 0.0)
                    continue
                if reply.retryable:
                    delay = webhook.backoff.wait(self.failures, reply.retry_after)
                    self._failed(detail, delay)
                else:
                    delay = webhook.backoff.maximum
                    self._failed(detail, delay)
                    logger.warning(
                        "webhook refused %d events of %s (%s); keeping them, next try in %.0fs",
                        len(batch),
                        self.conversation_id,
                        detail,
                        delay,
                    )
            await webhook.clock.sleep(delay)

    def _failed(self, detail: str, delay: float) -> None:
        self.webhook.retries += 1
        self.status.last_error = detail
        if self.failures in (1, 10) or self.failures % 100 == 0:
            logger.info(
                "webhook for %s failed %d time(s): %s; retrying in %.1fs",
                self.conversation_id,
                self.failures,
                detail,
                delay,
            )

    async def _acknowledge(self, batch: Batch) -> None:
        self._cursor = batch.last_id
        self.failures = 0
        self.status.delivered_through = batch.last_id
        self.status.last_error = None
        if self.log is not None:
            self.status.pending = max(len(self.log) - self._position(), 0)
        # What is left was appended after the batch went out: it waits from now on at most.
        self.waiting_since = None if self.status.pending == 0 else self.webhook.clock.monotonic()
        if not self.alive():
            raise _Gone  # its directory is going away: no cursor to save
        try:
            await asyncio.to_thread(write_cursor, self.directory, batch.last_id)
        except OSError as exc:  # the next start repeats from the older cursor: allowed
            logger.warning("cannot save the webhook cursor of %s: %s", self.conversation_id, exc)


# -- all conversations -----------------------------------------------------------------------------


class Webhook:
    """The pushers of every conversation, their shared client, limits and schedule."""

    def __init__(
        self,
        client: WebhookClient,
        *,
        batch_events: int = 100,
        batch_seconds: float = 0.25,
        batch_bytes: int = 4 * 1024 * 1024,
        backoff: Backoff | None = None,
        clock: Clock | None = None,
        concurrency: int = 32,
    ) -> None:
        self.client = client
        self.batch_events = batch_events
        self.batch_seconds = batch_seconds
        self.batch_bytes = batch_bytes
        self.backoff = backoff or Backoff()
        self.clock = clock or Clock()
        #: Requests in flight at once across conversations (one per conversation anyway).
        self.slots = asyncio.Semaphore(concurrency)
        #: Set at shutdown: no lingering, send what there is.
        self.flushing = False
        self.pushers: dict[str, Pusher] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        #: Failed attempts since start (each one is retried).
        self.retries = 0

    def pusher(self, conversation_id: str, directory: Path, alive: Callable[[], bool]) -> Pusher:
        """The conversation's pusher, made (idle, with its cursor read) if it has none yet."""
        found = self.pushers.get(conversation_id)
        if found is not None and not found.alive():  # left over from a deleted life of the id
            self.forget(conversation_id)
            found = None
        if found is None:
            found = self.pushers[conversation_id] = Pusher(self, conversation_id, directory, alive)
        return found

    def forget(self, conversation_id: str) -> None:
        """The conversation is gone: stop its pusher (in the background) and let it go."""
        pusher = self.pushers.pop(conversation_id, None)
        if pusher is not None:
            self._stopping.add(task := asyncio.get_running_loop().create_task(pusher.stop()))
            task.add_done_callback(self._stopping.discard)

    def watch(
        self,
        conversation_id: str,
        directory: Path,
        log: EventLog,
        alive: Callable[[], bool] = lambda: True,
    ) -> Pusher:
        """Push this conversation's log from its cursor on, and keep pushing what is appended."""
        pusher = self.pusher(conversation_id, directory, alive)
        pusher.attach(log)
        return pusher

    def _forget(self, pusher: Pusher) -> None:
        if self.pushers.get(pusher.conversation_id) is pusher:
            del self.pushers[pusher.conversation_id]

    def totals(self) -> WebhookTotals:
        statuses = [p.status for p in self.pushers.values() if p.alive()]
        errors = [s for s in statuses if s.last_error is not None]
        latest = max(
            errors, key=lambda s: s.last_attempt or datetime.min.replace(tzinfo=UTC), default=None
        )
        return WebhookTotals(
            conversations=len(statuses),
            behind=sum(1 for s in statuses if s.pending > 0),
            pending=sum(s.pending for s in statuses),
            failing=len(errors),
            last_error=None if latest is None else latest.last_error,
        )

    def lag(self) -> float:
        """Seconds the oldest event not acknowledged yet has waited (0: none waits)."""
        now = self.clock.monotonic()
        return max(
            (
                now - p.waiting_since
                for p in self.pushers.values()
                if p.waiting_since is not None and p.status.pending > 0
            ),
            default=0.0,
        )

    async def flush(self, timeout: float) -> None:
        """Send what the logs hold, for up to `timeout` seconds (failing receivers are not
        waited for), then stop every pusher. What is left goes after the next start."""
        self.flushing = True
        for pusher in self.pushers.values():
            pusher.wake()
        deadline = self.clock.monotonic() + timeout
        while self.clock.monotonic() < deadline:
            if all(p.settled for p in self.pushers.values()):
                break
            await asyncio.sleep(0.02)
        await self.stop()

    async def stop(self) -> None:
        await asyncio.gather(*(p.stop() for p in list(self.pushers.values())))


__all__ = [
    "Batch",
    "Pusher",
    "Webhook",
    "needs_push",
    "read_cursor",
    "write_cursor",
]
