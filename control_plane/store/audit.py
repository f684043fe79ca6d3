"""The audit log's rows (`audit_log`): appended, and read back by an operator; never changed.

This module is the table's one writer (`tests/test_layers.py` holds it to that), and it has
no statement that updates or deletes a row: the database refuses both anyway (migration 0009's
triggers). A row's `id` is chosen by the caller before the write, and a second insert of the
same id is skipped, so a write tried again after a passing failure is stored once.

Rows are read newest first and paged by `seq` (the order they were stored in): a page is the
rows below the last `seq` of the one before, so rows appended meanwhile never shift a page.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Select

from control_plane.store.db import Database
from control_plane.store.tables import audit_log as A
from control_plane.store.tables import users


@dataclass(frozen=True)
class AuditEntry:
    """One stored act."""

    seq: int
    id: str
    at: datetime
    actor: str
    """A user's id, or `operator`, `cli`, `system`, `sandbox:<id>`."""
    action: str
    target_kind: str
    target_id: str | None
    user_id: str | None
    """The account the act concerns (its sandbox, its settings, its keys)."""
    source: str
    """Where it came from: the client's address, `cli`, or the control-plane process."""
    details: dict[str, Any] | None


@dataclass(frozen=True)
class AuditQuery:
    """What an operator asks for; every field left None matches everything."""

    user: str | None = None
    """A user's id or name: the acts it did, and those done to its things."""
    action: str | None = None
    """An action, or a prefix of one ending in `*` (`sandbox.*`)."""
    actor: str | None = None
    target_id: str | None = None
    since: datetime | None = None
    """At or after."""
    until: datetime | None = None
    """Before."""
    before_seq: int | None = None
    """Paging: only rows stored before this one."""


async def insert(
    conn: AsyncConnection, db: Database, values: dict[str, Any], user_name: str | None = None
) -> None:
    """Append one row inside the caller's transaction (skipped when its id is stored);
    `user_name`: the `user_id` is that user's, read in the same statement."""
    if user_name is not None:
        values = {
            **values,
            "user_id": select(users.c.id).where(users.c.name == user_name).scalar_subquery(),
        }
    await conn.execute(db.insert_ignoring_duplicates(A).values(**values))


async def append(db: Database, values: dict[str, Any], user_name: str | None = None) -> None:
    """Append one row in a transaction of its own (skipped when its id is stored)."""
    async with db.begin() as conn:
        await insert(conn, db, values, user_name)


def _where(query: Select[Any], asked: AuditQuery) -> Select[Any]:
    if asked.user is not None:
        named = select(users.c.id).where(users.c.name == asked.user).scalar_subquery()
        query = query.where(
            or_(
                A.c.user_id == asked.user,
                A.c.actor == asked.user,
                A.c.user_id == named,
                A.c.actor == named,
            )
        )
    if asked.action is not None:
        if asked.action.endswith("*"):
            prefix = asked.action[:-1].replace("\\", "\\\\").replace("%", r"\%").replace("_", r"\_")
            query = query.where(A.c.action.like(prefix + "%", escape="\\"))
        else:
            query = query.where(A.c.action == asked.action)
    if asked.actor is not None:
        query = query.where(A.c.actor == asked.actor)
    if asked.target_id is not None:
        query = query.where(A.c.target_id == asked.target_id)
    if asked.since is not None:
        query = query.where(A.c.at >= asked.since)
    if asked.until is not None:
        query = query.where(A.c.at < asked.until)
    if asked.before_seq is not None:
        query = query.where(A.c.seq < asked.before_seq)
    return query


async def search(db: Database, asked: AuditQuery, limit: int) -> list[AuditEntry]:
    """The matching rows, newest first, `limit` at most."""
    query = _where(select(A), asked).order_by(A.c.seq.desc()).limit(limit)
    async with db.connect(aside=True) as conn:
        return [
            AuditEntry(
                seq=int(r.seq),
                id=r.id,
                at=r.at,
                actor=r.actor,
                action=r.action,
                target_kind=r.target_kind,
                target_id=r.target_id,
                user_id=r.user_id,
                source=r.source,
                details=r.details,
            )
            for r in await conn.execute(query)
        ]
