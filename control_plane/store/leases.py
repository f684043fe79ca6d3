"""Lease rows: which control-plane process works on something (a start task, a sandbox), until
when. A holder renews its leases while it works; once one has expired, any process may take it.

Lease times are wall-clock time of the holder's host, not the clock of stored records
(`Database.clock`, which tests move by hours): control planes sharing a database keep their
clocks in step (NTP), well within a lease's length.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, exists, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from control_plane.store.db import Database
from control_plane.store.tables import leases as L


def wall() -> datetime:
    """This host's clock, aware UTC."""
    return datetime.fromtimestamp(time.time(), UTC)


async def claim(db: Database, kind: str, key: str, holder: str, ttl: float) -> bool:
    """Take the lease when it is free, expired or ours already (then it is extended)."""
    async with db.begin() as conn:
        return await _claim(conn, db, kind, key, holder, ttl)


async def claim_in(
    conn: AsyncConnection, db: Database, kind: str, key: str, holder: str, ttl: float
) -> bool:
    """`claim` inside the caller's transaction (the lease comes with the row it guards)."""
    return await _claim(conn, db, kind, key, holder, ttl)


async def _claim(
    conn: AsyncConnection, db: Database, kind: str, key: str, holder: str, ttl: float
) -> bool:
    moment = wall()
    expires = moment + timedelta(seconds=ttl)
    # Two claimers of one expired row: the second waits for the first's row lock, then finds
    # the row no longer matching (not expired, not its own) and changes nothing.
    taken = await conn.execute(
        update(L)
        .where(L.c.kind == kind, L.c.key == key, or_(L.c.holder == holder, L.c.expires_at < moment))
        .values(holder=holder, expires_at=expires)
    )
    if taken.rowcount:
        return True
    inserted = await conn.execute(
        db.insert_ignoring_duplicates(L).values(
            kind=kind, key=key, holder=holder, expires_at=expires
        )
    )
    return bool(inserted.rowcount)


async def release(db: Database, kind: str, key: str, holder: str) -> None:
    async with db.begin() as conn:
        await conn.execute(delete(L).where(L.c.kind == kind, L.c.key == key, L.c.holder == holder))


async def renew(db: Database, holder: str, ttl: float) -> int:
    """Extend every lease of `holder` at once; how many it still has."""
    async with db.begin() as conn:
        done = await conn.execute(
            update(L).where(L.c.holder == holder).values(expires_at=wall() + timedelta(seconds=ttl))
        )
    return int(done.rowcount)


def held(kind: str, key: Any, holder: str) -> ColumnElement[bool]:
    """A condition for a guarded write: `holder` has this lease (`key` may be a column)."""
    return exists(select(L.c.key).where(L.c.kind == kind, L.c.key == key, L.c.holder == holder))


def free(kind: str, key: Any) -> ColumnElement[bool]:
    """A condition: nobody holds this lease, or its holder let it expire."""
    return ~exists(
        select(L.c.key).where(L.c.kind == kind, L.c.key == key, L.c.expires_at >= wall())
    )


async def holder_of(db: Database, kind: str, key: str) -> tuple[str, datetime] | None:
    async with db.connect() as conn:
        row = (
            await conn.execute(
                select(L.c.holder, L.c.expires_at).where(and_(L.c.kind == kind, L.c.key == key))
            )
        ).first()
    return None if row is None else (str(row.holder), row.expires_at)
