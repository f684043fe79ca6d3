"""LogIndex: what the event log knows of each stored event without reading it again.

Per event, in columns (arrays, not objects: a conversation can hold millions of events): where
its line starts and ends in the file, its id, kind, source, time and the position of its
parent. Never the event itself. Ids are increasing, so an id's position is a binary search;
times are non-decreasing, so a time range is two. A search walks these columns and returns
positions; the log reads from disk only the lines it returns.

The parents make the conversation tree of SPEC 6.1: `branch` is the path from the root to an
event. A stored line starts with the common fields in one order (events.kinds), so the index
is built from the front of each line without parsing the rest (`add_line`).
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.ids import EVENT_ID_PATTERN
from events import KIND_NAMES

SOURCES: tuple[str, ...] = ("agent", "user", "environment", "hook")
KIND_CODE = {name: i for i, name in enumerate(KIND_NAMES)}
SOURCE_CODE = {name: i for i, name in enumerate(SOURCES)}

#: What a search's `accept` is asked: whether the event at a position is wanted.
Accept = Callable[[int], bool]
#: The kind the `body` filter looks into.
MESSAGE = "MessageEvent"
#: The kind that hangs off HEAD without moving it.
STATE_UPDATE = "ConversationStateUpdateEvent"
_STATE_UPDATE = KIND_CODE[STATE_UPDATE]
#: Parent position of a root (or of an event whose parent is not in this log).
_NO_PARENT = -1

# Every stored line starts with the common fields in this order (see events.kinds).
_PREFIX = re.compile(
    rb'\{"id":"(' + EVENT_ID_PATTERN.encode() + rb')","timestamp":"([^"]+)","source":"([a-z]+)",'
    rb'"parent_id":(?:null|"((?:[^"\\]|\\.)*)"),"kind":"([A-Za-z]+)"'
)


@dataclass(frozen=True)
class Query:
    """Filters of an event search (SPEC 4.4 plus the usual OpenHands ones)."""

    kind: str | None = None
    source: str | None = None
    timestamp_gte: datetime | None = None
    timestamp_lt: datetime | None = None
    descending: bool = False
    branch: str | None = None
    """Only the events on the path from the root to this event (included)."""
    body: str | None = None
    """Only MessageEvents whose text holds this, whatever the case: the index knows no text,
    so the log reads each candidate (`accept` of page and count)."""


class LogIndex:
    """The columns of one log's events, in the order they are in the file."""

    def __init__(self) -> None:
        self.offsets = array("Q")  # where line i starts
        self.ends = array("Q")  # where it ends (a skipped unreadable line may follow it)
        self._ids: list[str] = []
        self._kinds = bytearray()
        self._sources = bytearray()
        self._times = array("d")  # seconds since the epoch, non-decreasing
        self._by_kind: dict[int, array[int]] = {}
        self._parents = array("q")  # position of each event's parent, or _NO_PARENT
        #: The latest time indexed (the next event's is never earlier).
        self.last_time = 0.0

    # -- adding --------------------------------------------------------------------------

    def add_line(self, line: bytes, offset: int) -> bool:
        """Index a stored line from its front; False when it is not one this log can read."""
        m = _PREFIX.match(line)
        if m is None:
            return False
        event_id, stamp, source, parent, kind = (
            None if g is None else g.decode() for g in m.groups()
        )
        assert event_id is not None and stamp is not None and source is not None and kind
        kind_code, source_code = KIND_CODE.get(kind), SOURCE_CODE.get(source)
        if kind_code is None or source_code is None:
            return False
        try:
            moment = datetime.fromisoformat(stamp).timestamp()
        except ValueError:
            return False
        self._append(offset, offset + len(line), event_id, kind_code, source_code, moment, parent)
        return True

    def add(
        self,
        offset: int,
        end: int,
        event_id: str,
        kind: str,
        source: str,
        moment: float,
        parent_id: str | None,
    ) -> None:
        """Index the event stored at file bytes offset..end (its id above every one so far)."""
        self._append(offset, end, event_id, KIND_CODE[kind], SOURCE_CODE[source], moment, parent_id)

    def _append(
        self,
        offset: int,
        end: int,
        event_id: str,
        kind: int,
        source: int,
        moment: float,
        parent_id: str | None,
    ) -> None:
        parent = None if parent_id is None else self.position(parent_id)
        position = len(self._ids)
        self._parents.append(_NO_PARENT if parent is None else parent)
        self.offsets.append(offset)
        self.ends.append(end)
        self._ids.append(event_id)
        self._kinds.append(kind)
        self._sources.append(source)
        self._times.append(moment)
        self._by_kind.setdefault(kind, array("I")).append(position)
        self.last_time = max(self.last_time, moment)

    # -- positions -----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def last_id(self) -> str | None:
        return self._ids[-1] if self._ids else None

    def id_at(self, position: int) -> str:
        return self._ids[position]

    def position(self, event_id: str) -> int | None:
        """Index of an event by id (ids are increasing, so this is a binary search)."""
        i = bisect_left(self._ids, event_id)
        return i if i < len(self._ids) and self._ids[i] == event_id else None

    def position_after(self, event_id: str) -> int:
        """Index of the first event whose id is greater than `event_id`."""
        return bisect_right(self._ids, event_id)

    def stop_after(self, position: int, max_events: int, max_bytes: int) -> int:
        """The end of the run of positions from `position` on: at most `max_events`, and
        about `max_bytes` of lines (always one, when there is one)."""
        end = min(len(self._ids), position + max_events)
        total, stop = 0, position
        while stop < end and (stop == position or total < max_bytes):
            total += self.ends[stop] - self.offsets[stop]
            stop += 1
        return stop

    # -- searching -----------------------------------------------------------------------

    def page(
        self, query: Query, limit: int, page_id: str | None, accept: Accept | None = None
    ) -> tuple[list[int], str | None]:
        """The positions of one page, in the query's order, and the id that starts the next;
        `accept` is asked about every position the columns match."""
        picked: list[int] = []
        for p in self._matches(query, page_id, accept):
            picked.append(p)
            if len(picked) > limit:
                break
        next_id = self._ids[picked.pop()] if len(picked) > limit else None
        return picked, next_id

    def count(self, query: Query, accept: Accept | None = None) -> int:
        if query.source is None and accept is None:
            return len(self._candidates(query))
        return sum(1 for _ in self._matches(query, None, accept))

    def _candidates(self, query: Query) -> Sequence[int]:
        """Positions matching kind and time, as a sorted sequence (no copy of the index)."""
        lo, hi = 0, len(self._ids)
        if query.timestamp_gte is not None:
            lo = bisect_left(self._times, query.timestamp_gte.timestamp())
        if query.timestamp_lt is not None:
            hi = bisect_left(self._times, query.timestamp_lt.timestamp())
        kind = query.kind
        if query.body is not None:
            if kind not in (None, MESSAGE):
                return ()
            kind = MESSAGE
        if query.branch is not None:
            code = None if kind is None else KIND_CODE[kind]
            return [
                p
                for p in self.branch(query.branch)
                if lo <= p < hi and (code is None or self._kinds[p] == code)
            ]
        if kind is None:
            return range(lo, max(lo, hi))
        positions = self._by_kind.get(KIND_CODE[kind], array("I"))
        return _Slice(positions, bisect_left(positions, lo), bisect_left(positions, hi))

    def _matches(
        self, query: Query, page_id: str | None = None, accept: Accept | None = None
    ) -> Iterable[int]:
        """Matching positions in the query's order, starting at `page_id` when given."""
        found = self._candidates(query)
        if query.descending:
            stop = len(found)
            if page_id is not None:  # events whose id is at most page_id
                stop = bisect_left(found, bisect_right(self._ids, page_id))
            order: Iterable[int] = (found[i] for i in range(stop - 1, -1, -1))
        else:
            start = 0
            if page_id is not None:  # events whose id is at least page_id
                start = bisect_left(found, bisect_left(self._ids, page_id))
            order = (found[i] for i in range(start, len(found)))
        if query.source is not None:
            code = SOURCE_CODE[query.source]
            order = (p for p in order if self._sources[p] == code)
        return order if accept is None else (p for p in order if accept(p))

    # -- the conversation tree -----------------------------------------------------------

    def last_on_tree(self) -> str | None:
        """The id of the latest event that moved HEAD (a state update never does)."""
        for p in range(len(self._ids) - 1, -1, -1):
            if self._kinds[p] != _STATE_UPDATE:
                return self._ids[p]
        return None

    def only_state_updates_since(self, position: int) -> bool:
        """Whether every event from `position` on is a state update (none moved HEAD)."""
        return position <= len(self._ids) and all(
            self._kinds[p] == _STATE_UPDATE for p in range(position, len(self._ids))
        )

    def branch(self, leaf: str | None) -> list[int]:
        """Positions of the path from the root to `leaf` (included), in order; [] for None or
        an id not (yet) indexed."""
        at = None if leaf is None else self.position(leaf)
        path: list[int] = []
        while at is not None and at != _NO_PARENT:
            path.append(at)
            at = self._parents[at]
        path.reverse()
        return path

    def last_on_branch(self, leaf: str | None, kind: str, source: str | None = None) -> str | None:
        """The id of the latest event of `kind` (and `source`) on the branch ending at `leaf`."""
        code, src = KIND_CODE[kind], None if source is None else SOURCE_CODE[source]
        at = None if leaf is None else self.position(leaf)
        while at is not None and at != _NO_PARENT:
            if self._kinds[at] == code and (src is None or self._sources[at] == src):
                return self._ids[at]
            at = self._parents[at]
        return None


class _Slice(Sequence[int]):
    """A view of part of an array without copying it."""

    def __init__(self, data: array[int], start: int, stop: int) -> None:
        self._data, self._start, self._stop = data, start, max(start, stop)

    def __len__(self) -> int:
        return self._stop - self._start

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._data[self._start + i]

    def __iter__(self) -> Iterator[int]:
        for i in range(self._start, self._stop):
            yield self._data[i]

    def __reversed__(self) -> Iterator[int]:
        for i in range(self._stop - 1, self._start - 1, -1):
            yield self._data[i]


__all__ = ["SOURCES", "LogIndex", "Query"]
