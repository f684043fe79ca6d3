"""Webhook push (SPEC 4.5): every stored event of a conversation POSTed, in order, to the control plane.

Delivery is driven from the durable log, never from memory. Each conversation has a cursor
file (`webhook.json` in its directory: the id of the last event the receiver acknowledged)
and one Pusher that reads the log from there, posts one batch at a time (so order holds) and
moves the cursor on a 2xx. A crash between a 2xx and the cursor's save repeats that batch:
delivery is at least once, and receivers dedupe by event id. Nothing is ever dropped: failed
batches are retried for ever and the lag is reported instead (`WebhookStatus`).

Retries: 408, 429, 5xx and network errors back off exponentially with jitter (`Backoff`,
about 1 s to 60 s) unless the receiver says Retry-After; any other 4xx means the receiver
refuses the batch: it is kept, the answer logged, and tried again at the longest delay.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import hashlib
import hmac
import json
import logging
import os
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from agent_server import __version__
from agent_server.events import Event
from agent_server.log import EventLog
from agent_server.record import WebhookStatus, WebhookTotals

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

CURSOR_FILE = "webhook.json"
LOG_FILE = "events.jsonl"
_ID = re.compile(rb'\{"id":"([0-9A-HJKMNP-TV-Z]{26})"')


# -- failures --------------------------------------------------------------------------------


class WebhookError(Exception):
    """A webhook request did not get an answer."""


class WebhookUnreachable(WebhookError):
    """Connection refused or reset, DNS failure, timeout: no HTTP answer at all."""


class _Gone(Exception):
    """The conversation was deleted: its pusher stops."""


# -- seams: time and the HTTP client ------------------------------------------------------------


class Clock:
    """Time and sleeping for the retry code; tests pass one that records instead of waiting."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass
class Backoff:
    """Exponential backoff with jitter: failure n waits between half of and all of
    minimum * 2**(n-1), never less than `minimum` nor more than `maximum`."""

    minimum: float = 1.0
    maximum: float = 60.0
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, failures: int) -> float:
        ceiling = min(self.maximum, self.minimum * 2 ** min(max(failures - 1, 0), 62))
        return min(self.maximum, max(self.minimum, self.rng.uniform(ceiling / 2, ceiling)))

    def retry_after(self, seconds: float) -> float:
        """The receiver's Retry-After, bounded by `maximum` so a recovered receiver is not
        left waiting for an hour."""
        return min(self.maximum, max(self.minimum, seconds))


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return max(0.0, moment.timestamp() - now)


def signing_key(secret: str) -> bytes:
    """The HMAC key of a webhook secret: `whsec_<base64>` (Standard Webhooks) is decoded,
    anything else is used as given (its UTF-8 bytes)."""
    if secret.startswith("whsec_"):
        return base64.b64decode(secret[len("whsec_"):])
    return secret.encode()


def sign(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """The Standard Webhooks signature header value: `v1,<base64 HMAC-SHA256 of id.timestamp.body>`."""
    signed = message_id.encode() + b"." + str(timestamp).encode() + b"." + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


@dataclass(frozen=True)
class Reply:
    """What the receiver answered."""

    status: int
    text: str
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def retryable(self) -> bool:
        """Worth retrying on the backoff schedule (the rest are refusals of the batch)."""
        return self.status in (408, 429) or self.status >= 500


class WebhookClient:
    """The one outbound HTTP client of the webhook: timeouts set, transport swappable.

    Tests aim it at a local receiver by `base_url`, or replace the network entirely with
    `transport=httpx.MockTransport(handler)`.
    """

    def __init__(self, base_url: str, api_key: str, secret: str | None = None, *,
                 timeout: float = 30.0, transport: httpx.AsyncBaseTransport | None = None,
                 clock: Clock | None = None, max_connections: int = 32) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._key = signing_key(secret) if secret else None
        self._clock = clock or Clock()
        import httpx  # only a server with a webhook pays for importing it

        self._http = httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0), pool=None),
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=max_connections),
            follow_redirects=False,
        )

    def url(self, conversation_id: str) -> str:
        return f"{self.base_url}/events/{conversation_id}"

    def headers(self, message_id: str, body: bytes) -> dict[str, str]:
        headers = {
            "content-type": "application/json",
            "user-agent": f"agent-server/{__version__}",
            "x-session-api-key": self._api_key,
        }
        if self._key is not None:
            stamp = int(self._clock.time())
            headers["webhook-id"] = message_id
            headers["webhook-timestamp"] = str(stamp)
            headers["webhook-signature"] = sign(self._key, message_id, stamp, body)
        return headers

    async def post(self, conversation_id: str, body: bytes, message_id: str) -> Reply:
        import httpx

        try:
            response = await self._http.post(self.url(conversation_id), content=body,
                                             headers=self.headers(message_id, body))
        except httpx.HTTPError as exc:  # no answer: connect, read, write or protocol failure
            raise WebhookUnreachable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from exc
        return Reply(
            status=response.status_code,
            text=response.text[:1000],
            retry_after=parse_retry_after(response.headers.get("retry-after"), self._clock.time()),
        )

    async def aclose(self) -> None:
        await self._http.aclose()


# -- cursor files ---------------------------------------------------------------------------------


def read_cursor(directory: Path) -> str | None:
    """The last acknowledged event id; None when there is none (or the file is unreadable:
    everything is then sent again, which at-least-once allows)."""
    try:
        with open(directory / CURSOR_FILE, "rb") as f:
            value = json.loads(f.read()).get("delivered_through")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def write_cursor(directory: Path, event_id: str) -> None:
    """Replace the cursor file (rename, without fsync: losing it to a power cut only
    repeats events, and this runs once per batch)."""
    path = directory / CURSOR_FILE
    tmp = directory / f".{CURSOR_FILE}.tmp"
    with open(tmp, "wb") as f:
        f.write(json.dumps({"delivered_through": event_id}).encode())
    os.replace(tmp, path)


def last_logged_id(path: Path, chunk: int = 65536) -> str | None:
    """The id of the last complete line of an event log, read from its end (no index built).

    Returns "" when that line has no readable id: the caller should open the log to know more.
    """
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None
    with f:
        pos = f.seek(0, os.SEEK_END)
        buf = b""
        while pos > 0:
            step = min(chunk, pos)
            pos -= step
            f.seek(pos)
            buf = f.read(step) + buf
            end = buf.rfind(b"\n")  # a torn last line (no newline) is not an event
            if end == -1:
                continue
            start = buf.rfind(b"\n", 0, end)
            if start == -1 and pos > 0:
                continue
            match = _ID.match(buf, start + 1)
            return match.group(1).decode() if match else ""
    return None


def needs_push(directory: Path) -> bool:
    """Whether the log holds events after the cursor (cheap: one small file and a log tail)."""
    last = last_logged_id(directory / LOG_FILE)
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

    def __init__(self, webhook: Webhook, conversation_id: str, directory: Path,
                 alive: Callable[[], bool]) -> None:
        self.webhook = webhook
        self.conversation_id = conversation_id
        self.directory = directory
        self.alive = alive
        self.status = WebhookStatus(delivered_through=read_cursor(directory))
        self.log: EventLog | None = None
        self.failures = 0
        self._cursor = self.status.delivered_through
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
        self._idle.clear()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"webhook {self.conversation_id}")

    def _on_events(self, written: Sequence[tuple[Event, bytes]]) -> None:
        # Runs inside the log's writer: count and wake, nothing more.
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
            if (available < limit and not self.webhook.flushing
                    and self._linger_from is not None):
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
            self.status.last_attempt = datetime.fromtimestamp(webhook.clock.time(), timezone.utc)
            try:
                async with webhook.slots:
                    reply = await webhook.client.post(self.conversation_id, batch.body,
                                                      batch.message_id)
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
                    batch = Batch(batch.first_id, self.log.id_at(self._position() + half - 1),
                                  batch.lines[:half])
                    self._failed(detail + f" (retrying with {half} events)", 0.0)
                    continue
                if reply.retryable:
                    delay = (webhook.backoff.retry_after(reply.retry_after)
                             if reply.retry_after is not None
                             else webhook.backoff.delay(self.failures))
                    self._failed(detail, delay)
                else:
                    delay = webhook.backoff.maximum
                    self._failed(detail, delay)
                    logger.warning(
                        "webhook refused %d events of %s (%s); keeping them, next try in %.0fs",
                        len(batch), self.conversation_id, detail, delay)
            await webhook.clock.sleep(delay)

    def _failed(self, detail: str, delay: float) -> None:
        self.status.last_error = detail
        if self.failures in (1, 10) or self.failures % 100 == 0:
            logger.info("webhook for %s failed %d time(s): %s; retrying in %.1fs",
                        self.conversation_id, self.failures, detail, delay)

    async def _acknowledge(self, batch: Batch) -> None:
        self._cursor = batch.last_id
        self.failures = 0
        self.status.delivered_through = batch.last_id
        self.status.last_error = None
        if self.log is not None:
            self.status.pending = max(len(self.log) - self._position(), 0)
        if not self.alive():
            raise _Gone  # its directory is going away: no cursor to save
        try:
            await asyncio.to_thread(write_cursor, self.directory, batch.last_id)
        except OSError as exc:  # the next start repeats from the older cursor: allowed
            logger.warning("cannot save the webhook cursor of %s: %s", self.conversation_id, exc)


# -- all conversations -----------------------------------------------------------------------------


class Webhook:
    """The pushers of every conversation, their shared client, limits and schedule."""

    def __init__(self, client: WebhookClient, *, batch_events: int = 100,
                 batch_seconds: float = 0.25, batch_bytes: int = 4 * 1024 * 1024,
                 backoff: Backoff | None = None, clock: Clock | None = None,
                 concurrency: int = 32) -> None:
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

    def watch(self, conversation_id: str, directory: Path, log: EventLog,
              alive: Callable[[], bool] = lambda: True) -> Pusher:
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
        latest = max(errors, key=lambda s: s.last_attempt or datetime.min.replace(tzinfo=timezone.utc),
                     default=None)
        return WebhookTotals(
            conversations=len(statuses),
            behind=sum(1 for s in statuses if s.pending > 0),
            pending=sum(s.pending for s in statuses),
            failing=len(errors),
            last_error=None if latest is None else latest.last_error,
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
    "Backoff",
    "Batch",
    "Clock",
    "Pusher",
    "Reply",
    "Webhook",
    "WebhookClient",
    "WebhookError",
    "WebhookUnreachable",
    "last_logged_id",
    "needs_push",
    "parse_retry_after",
    "read_cursor",
    "sign",
    "signing_key",
    "write_cursor",
]
