"""EventLog: the append-only, durable JSON Lines log of one conversation.

It is the only writer of events. An append returns once the event is on disk (fsync, shared
by the events that arrive while a sync is in flight: group commit), and only then is the event
indexed and handed to listeners, so nobody ever sees an event a crash could take back.

The index (agent_server.log_index) is built on open in one sequential read and holds, per
event, its offset, id, kind, source, time and parent: never the event itself. A search walks
the index and reads from disk only the lines it returns, so its cost follows the page size, not
the length of the conversation.

The log is also the conversation tree of SPEC 6.1: an event's `parent_id` is the HEAD when it
is appended (null for the first event), and HEAD then moves to it, except for state updates
(ConversationStateUpdateEvent), which hang off HEAD without moving it. `navigate` moves HEAD
back to any event, so what is appended next starts a sibling branch; every branch stays in the
file. A branch is the path from the root to its last event.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ulid import ULID

from agent_server.log_index import STATE_UPDATE, LogIndex, Query
from core.files import write_atomic
from core.ids import EVENT_ID_PATTERN
from events import Event, format_timestamp, parse_event

logger = logging.getLogger(__name__)

_COMMON = ("id", "timestamp", "source", "parent_id", "kind")

#: The name of a conversation's log file in its directory.
LOG_FILE_NAME = "events.jsonl"
#: The start of a stored line, up to its id (the id always comes first: see events.kinds).
_ID_FIRST = re.compile(rb'\{"id":"(' + EVENT_ID_PATTERN.encode() + rb')"')

#: Called with the events of one durable write, in order, with their stored JSON lines.
Listener = Callable[[Sequence[tuple[Event, bytes]]], None]


class LogError(Exception):
    """The log cannot be used (unreadable file, failed write)."""


class _Ids:
    """Monotonic ULIDs: strictly increasing even within a millisecond or if the clock steps back."""

    def __init__(self, last: str | None) -> None:
        self._last = int(ULID.from_str(last)) if last else 0

    def next(self) -> str:
        now_ms = int(time.time() * 1000)
        candidate = (now_ms << 80) | int.from_bytes(secrets.token_bytes(10), "big")
        if candidate <= self._last:
            candidate = self._last + 1
        self._last = candidate
        return str(ULID.from_int(candidate))


class EventLog:
    """One conversation's events. Open with `EventLog.open` (blocking: call it off the loop)."""

    def __init__(
        self,
        path: Path,
        fd: int,
        redactor: Callable[[Any], Any] | None = None,
        sinks: Iterable[Listener] = (),
        on_write: Callable[[int, float], None] | None = None,
    ) -> None:
        self.path = path
        self._fd = fd
        self._index = LogIndex()
        self._end = 0  # end of the file's last complete line
        #: HEAD: the event the next one hangs off (None: the empty tree). It moves as events
        #: are appended, before they are on disk; a failed write moves it back.
        self._head_id: str | None = None
        self._pending: list[tuple[list[Event], list[bytes], asyncio.Future[None], str | None]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._listeners: list[Listener] = list(sinks)
        self._closed = False
        self._ids_gen = _Ids(None)
        #: Masks secrets in an event's JSON data before it is written (None: nothing to mask).
        self._redactor = redactor
        #: Told of each durable write: how many events, and how long write and sync took.
        self._on_write = on_write

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        redactor: Callable[[Any], Any] | None = None,
        sinks: Iterable[Listener] = (),
        on_write: Callable[[int, float], None] | None = None,
    ) -> EventLog:
        """Open (creating if needed), cut a torn last line, and build the index.

        `redactor` masks each event's JSON data before it is written; `sinks` hear every
        durable write from the first on (more can `subscribe` later).
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        log = cls(path, fd, redactor, sinks, on_write)
        try:
            log._load()
        except BaseException:
            os.close(fd)
            raise
        return log

    @staticmethod
    def write_new(path: Path, lines: Sequence[bytes]) -> None:
        """A new log file holding `lines` as they are (a fork's history, its ids kept), never
        seen half written. Blocking: call it off the loop, then `open` it as any other."""
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, b"".join(line + b"\n" for line in lines))

    def _load(self) -> None:
        offset = 0
        with open(self.path, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    logger.warning("%s: cutting a torn last line of %d bytes", self.path, len(line))
                    break
                if not self._index.add_line(line, offset):
                    logger.warning("%s: skipping an unreadable line at byte %d", self.path, offset)
                offset += len(line)
        size = os.fstat(self._fd).st_size
        if size != offset:
            os.ftruncate(self._fd, offset)
            os.fsync(self._fd)
        self._end = offset
        self._ids_gen = _Ids(self._index.last_id)
        self._head_id = self._index.last_on_tree()

    # -- appending -----------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener` after each durable write; returns a function that unsubscribes."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    async def append(self, *events: Event) -> list[Event]:
        """Give each event its id and time, write it, and return once it is on disk.

        Ids and times are taken in call order, so the log's order is the order of the calls.
        A caller cancelled while waiting does not undo the write.
        """
        if self._closed:
            raise LogError(f"{self.path} is closed")
        lines, stored = [], []
        head_before = self._head_id
        for event in events:
            event.id = self._ids_gen.next()
            event.parent_id = self._head_id
            if event.kind != STATE_UPDATE:
                self._head_id = event.id
            now = max(time.time(), self._index.last_time)
            self._index.last_time = now
            event.timestamp = format_timestamp(datetime.fromtimestamp(now, UTC))
            line, kept = self._serialize(event)
            lines.append(line)
            stored.append(kept)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((stored, lines, done, head_before))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(
                self._flush(), name=f"flush {self.path.parent.name}"
            )
        await asyncio.shield(done)
        return list(events)

    def _serialize(self, event: Event) -> tuple[bytes, Event]:
        """The stored line, and the event as stored (masked when a secret was in it)."""
        line = event.model_dump_json().encode() + b"\n"
        if self._redactor is None:
            return line, event
        data = event.model_dump(mode="json")
        common = {k: data.pop(k) for k in _COMMON}  # ids and times are never secrets
        masked = self._redactor(data)
        if masked == data:
            return line, event
        masked = {**common, **masked}
        line = json.dumps(masked, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        return line, parse_event(line)

    async def _flush(self) -> None:
        try:
            await self._flush_pending()
        finally:
            if self._closed:  # close() came while writing: the fd is ours to release
                self._release()

    async def _flush_pending(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            if self._closed:
                for _, _, done, _ in batch:
                    if not done.done():
                        done.set_exception(LogError(f"{self.path} was closed before the write"))
                continue
            data = b"".join(line for _, lines, _, _ in batch for line in lines)
            try:
                seconds = await asyncio.to_thread(self._write, data)
            except BaseException as exc:
                lost = {e.id for events, _, _, _ in batch for e in events}
                if self._head_id in lost:  # HEAD goes back to where the lost events hung
                    self._head_id = batch[0][3]
                for _, _, done, _ in batch:
                    if not done.done():
                        done.set_exception(LogError(f"append to {self.path} failed: {exc}"))
                continue
            written: list[tuple[Event, bytes]] = []
            for events, lines, _, _ in batch:
                for event, line in zip(events, lines):
                    assert event.id is not None and event.timestamp is not None
                    when = datetime.fromisoformat(event.timestamp).timestamp()
                    start, self._end = self._end, self._end + len(line)
                    self._index.add(
                        start, self._end, event.id, event.kind, event.source, when, event.parent_id
                    )
                    written.append((event, line))
            for _, _, done, _ in batch:
                if not done.done():
                    done.set_result(None)
            if self._on_write is not None:
                self._on_write(len(written), seconds)
            for listener in list(self._listeners):
                try:
                    listener(written)
                except Exception:  # a listener must never break the writer
                    logger.exception("event listener failed")

    def _write(self, data: bytes) -> float:
        """Write and sync; the seconds it took."""
        started = time.perf_counter()
        view = memoryview(data)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            os.fdatasync(self._fd)
            return time.perf_counter() - started
        except BaseException:
            # Leave no half batch behind: the next open would keep its complete lines.
            os.ftruncate(self._fd, self._end)
            raise

    async def drain(self) -> None:
        """Wait until every append so far is on disk."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)

    def close(self) -> None:
        """No more appends; the file is closed now, or after a write in flight (never during)."""
        if self._closed:
            return
        self._closed = True
        if self._flusher is None or self._flusher.done():
            self._release()

    def _release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # -- reading -------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._index)

    @property
    def last_id(self) -> str | None:
        return self._index.last_id

    def position(self, event_id: str) -> int | None:
        """Index of an event by id."""
        return self._index.position(event_id)

    def position_after(self, event_id: str) -> int:
        """Index of the first event whose id is greater than `event_id`."""
        return self._index.position_after(event_id)

    def id_at(self, position: int) -> str:
        return self._index.id_at(position)

    def get(self, event_id: str) -> bytes | None:
        i = self.position(event_id)
        return None if i is None else self.read([i])[0]

    def read(self, positions: Sequence[int]) -> list[bytes]:
        """The stored lines (without newline) at these positions; adjacent ones in one read."""
        out: list[bytes] = []
        offsets, ends = self._index.offsets, self._index.ends
        i = 0
        while i < len(positions):
            j = i
            while (
                j + 1 < len(positions)
                and positions[j + 1] == positions[j] + 1
                and ends[positions[j]] == offsets[positions[j + 1]]
            ):
                j += 1
            start, end = offsets[positions[i]], ends[positions[j]]
            chunk = os.pread(self._fd, end - start, start)
            out.extend(chunk.split(b"\n")[: j - i + 1])
            i = j + 1
        return out

    def search(
        self, query: Query, limit: int, page_id: str | None = None
    ) -> tuple[list[bytes], str | None]:
        """One page of stored lines and the id that starts the next page (or None)."""
        picked, next_id = self._index.page(query, limit, page_id, self._holding(query.body))
        lines = self.read(sorted(picked))
        if query.descending:
            lines.reverse()
        return lines, next_id

    def count(self, query: Query) -> int:
        return self._index.count(query, self._holding(query.body))

    def _holding(self, body: str | None) -> Callable[[int], bool] | None:
        """Whether the message at a position holds `body` in its text, reasoning included,
        whatever the case (OpenHands' `body` filter; the line is read and parsed)."""
        if body is None:
            return None
        wanted = body.casefold()

        def accept(position: int) -> bool:
            try:
                data = json.loads(self.read([position])[0])
                message = data.get("llm_message") or {}
                parts = [
                    c.get("text")
                    for c in [*message.get("content", []), *data.get("extended_content", [])]
                ]
                parts.append(message.get("reasoning_content"))
            except (ValueError, AttributeError, TypeError):
                return False
            return wanted in " ".join(p for p in parts if isinstance(p, str)).casefold()

        return accept

    def lines_after(self, position: int, max_events: int, max_bytes: int) -> list[bytes]:
        """Stored lines from `position` on, at most `max_events` and about `max_bytes`."""
        return self.read(range(position, self._index.stop_after(position, max_events, max_bytes)))

    # -- the conversation tree -----------------------------------------------------------

    @property
    def head(self) -> str | None:
        """The event the next appended one hangs off (None: the empty tree)."""
        return self._head_id

    def navigate(self, event_id: str | None) -> None:
        """Move HEAD to a stored event (None: the empty tree); KeyError for an unknown id."""
        if event_id is not None and self.position(event_id) is None:
            raise KeyError(event_id)
        self._head_id = event_id

    def restore_head(self, event_id: str | None, set_at: int) -> None:
        """HEAD as a navigate left it when the log held `set_at` events, unless an event that
        moves HEAD was appended since (then HEAD is that one's, as on open)."""
        if not self._index.only_state_updates_since(set_at):
            return
        if event_id is None or self.position(event_id) is not None:
            self._head_id = event_id

    def branch(self, leaf: str | None) -> list[int]:
        """Positions of the path from the root to `leaf` (included), in order."""
        return self._index.branch(leaf)

    def last_on_branch(self, leaf: str | None, kind: str, source: str | None = None) -> str | None:
        """The id of the latest event of `kind` (and `source`) on the branch ending at `leaf`."""
        return self._index.last_on_branch(leaf, kind, source)


# -- the log file seen from outside ----------------------------------------------------------


def last_logged_id(path: Path, chunk: int = 65536) -> str | None:
    """The id of the last complete line of a log file, read from its end (no index built), for
    a caller that only needs to know whether there is something new.

    None when there is no file or no complete line; "" when that line does not start with an
    id: open the log to know more.
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
            match = _ID_FIRST.match(buf, start + 1)
            return match.group(1).decode() if match else ""
    return None


__all__ = ["LOG_FILE_NAME", "EventLog", "Listener", "LogError", "Query", "last_logged_id"]
