"""Stored events from the webhook: idempotent batch inserts, filtered pages, the whole trajectory.

Events are kept in arrival order (`seq`), which is the agent server's log order: it delivers
each conversation's events in order, one batch at a time. Timestamps are stored in the schema's
one text form (UTC, microseconds, explicit offset), so text comparison is time comparison.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from sqlalchemy import delete, func, select

from control_plane.models import EventFilters
from control_plane.store.db import Database
from control_plane.store.tables import events as E


async def insert_batch(db: Database, rows: Sequence[dict[str, Any]]) -> None:
    """One transaction; rows whose (conversation_id, event_id) is stored already are skipped."""
    if not rows:
        return
    async with db.begin() as conn:
        await conn.execute(db.insert_ignoring_duplicates(E), list(rows))


def _where(conversation_id: str, f: EventFilters) -> list[Any]:
    clauses: list[Any] = [E.c.conversation_id == conversation_id]
    if f.kind:
        clauses.append(E.c.kind == f.kind)
    if f.source:
        clauses.append(E.c.source == f.source)
    if f.timestamp_gte:
        clauses.append(E.c.timestamp >= f.timestamp_gte)
    if f.timestamp_lt:
        clauses.append(E.c.timestamp < f.timestamp_lt)
    return clauses


async def search(
    db: Database,
    conversation_id: str,
    f: EventFilters,
    *,
    descending: bool,
    limit: int,
    page: int | None,
) -> tuple[list[str], int | None]:
    """Bodies (JSON text) of one page, and the position where the next page starts."""
    query = select(E.c.seq, E.c.body).where(*_where(conversation_id, f))
    if page is not None:
        query = query.where(E.c.seq <= page if descending else E.c.seq >= page)
    query = query.order_by(E.c.seq.desc() if descending else E.c.seq.asc()).limit(limit + 1)
    async with db.connect(aside=True) as conn:
        found = (await conn.execute(query)).all()
    following = found[limit].seq if len(found) > limit else None
    return [r.body for r in found[:limit]], following


async def count(db: Database, conversation_id: str, f: EventFilters) -> int:
    async with db.connect(aside=True) as conn:
        return int(
            await conn.scalar(
                select(func.count()).select_from(E).where(*_where(conversation_id, f))
            )
            or 0
        )


async def all_bodies(db: Database, conversation_id: str, chunk: int = 1000) -> AsyncIterator[str]:
    """Every stored event in order, read a chunk at a time (downloads of long conversations)."""
    after = 0
    while True:
        async with db.connect(aside=True) as conn:
            found = (
                await conn.execute(
                    select(E.c.seq, E.c.body)
                    .where(E.c.conversation_id == conversation_id, E.c.seq > after)
                    .order_by(E.c.seq)
                    .limit(chunk)
                )
            ).all()
        for row in found:
            yield row.body
        if len(found) < chunk:
            return
        after = found[-1].seq


async def position(db: Database, conversation_id: str, event_id: str) -> int | None:
    """Where an event sits in the conversation's order (None when it is not stored)."""
    async with db.connect() as conn:
        found = await conn.scalar(
            select(E.c.seq).where(E.c.conversation_id == conversation_id, E.c.event_id == event_id)
        )
    return None if found is None else int(found)


async def after(
    db: Database, conversation_id: str, seq: int, limit: int
) -> list[tuple[int, str, str]]:
    """(seq, event id, body) of the events stored after position `seq`, in order (live relays)."""
    async with db.connect() as conn:
        found = (
            await conn.execute(
                select(E.c.seq, E.c.event_id, E.c.body)
                .where(E.c.conversation_id == conversation_id, E.c.seq > seq)
                .order_by(E.c.seq)
                .limit(limit)
            )
        ).all()
    return [(int(r.seq), str(r.event_id), str(r.body)) for r in found]


async def remove(db: Database, conversation_id: str) -> None:
    async with db.begin(aside=True) as conn:
        await conn.execute(delete(E).where(E.c.conversation_id == conversation_id))
