"""App-conversation rows, joined with their sandbox's status for the record."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Select, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from control_plane.models import ConversationFilters, ConversationRow, SandboxStatus, stored_status
from control_plane.store.db import Database
from control_plane.store.tables import app_conversations, sandboxes
from events.status import ExecutionStatus

C = app_conversations


def _row(row: Any) -> ConversationRow:
    data = dict(row._mapping)
    data["sandbox_status"] = SandboxStatus(data["sandbox_status"])
    data["tags"] = dict(data["tags"] or {})
    data["pr_number"] = list(data["pr_number"] or [])
    return ConversationRow(**data)


def _select() -> Select[Any]:
    return select(C, sandboxes.c.status.label("sandbox_status")).join(
        sandboxes, sandboxes.c.id == C.c.sandbox_id
    )


async def insert(conn: AsyncConnection, moment: datetime, **values: Any) -> None:
    """A conversation made at `moment`, not shown until its start is READY (`mark_started`)."""
    await conn.execute(
        C.insert().values(
            started=False,
            tags={},
            created_at=moment,
            updated_at=moment,
            last_activity_at=moment,
            **values,
        )
    )


async def get(
    db: Database, conversation_id: str, user_id: str | None = None
) -> ConversationRow | None:
    query = _select().where(C.c.id == conversation_id)
    if user_id is not None:
        query = query.where(C.c.user_id == user_id)
    async with db.connect() as conn:
        row = (await conn.execute(query)).first()
    return None if row is None else _row(row)


async def get_many(db: Database, ids: list[str], user_id: str) -> dict[str, ConversationRow]:
    query = _select().where(C.c.id.in_(ids), C.c.user_id == user_id, C.c.started.is_(True))
    async with db.connect() as conn:
        return {r.id: r for r in (_row(x) for x in await conn.execute(query))}


def _filtered(query: Select[Any], user_id: str, f: ConversationFilters) -> Select[Any]:
    query = query.where(C.c.user_id == user_id, C.c.started.is_(True))
    if f.title_contains:
        escaped = f.title_contains.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = query.where(func.lower(C.c.title).like(f"%{escaped.lower()}%", escape="\\"))
    for column, op, value in (
        (C.c.created_at, "ge", f.created_at_gte),
        (C.c.created_at, "lt", f.created_at_lt),
        (C.c.updated_at, "ge", f.updated_at_gte),
        (C.c.updated_at, "lt", f.updated_at_lt),
    ):
        if value is not None:
            query = query.where(column >= value if op == "ge" else column < value)
    if f.sandbox_id:
        query = query.where(C.c.sandbox_id == f.sandbox_id)
    if f.top_level:
        query = query.where(C.c.parent_conversation_id.is_(None))
    return query


async def search(
    db: Database, user_id: str, f: ConversationFilters, *, order: str, limit: int, offset: int
) -> list[ConversationRow]:
    """`order` is one of CREATED_AT, CREATED_AT_DESC, UPDATED_AT, UPDATED_AT_DESC, TITLE,
    TITLE_DESC."""
    column = {"CREATED": C.c.created_at, "UPDATED": C.c.updated_at, "TITLE": C.c.title}[
        order.split("_")[0]
    ]
    desc = order.endswith("_DESC")
    query = _filtered(_select(), user_id, f).order_by(
        column.desc() if desc else column.asc(), C.c.id.desc() if desc else C.c.id.asc()
    )
    async with db.connect(aside=True) as conn:
        return [_row(r) for r in await conn.execute(query.limit(limit).offset(offset))]


async def count(db: Database, user_id: str, f: ConversationFilters) -> int:
    query = _filtered(select(func.count()).select_from(C), user_id, f)
    async with db.connect(aside=True) as conn:
        return int(await conn.scalar(query) or 0)


async def update_fields(
    db: Database, conversation_id: str, *, touch: bool = True, **values: Any
) -> None:
    if touch:
        values["updated_at"] = db.now()
    async with db.begin() as conn:
        await conn.execute(update(C).where(C.c.id == conversation_id).values(**values))


async def mark_started(conn: AsyncConnection, conversation_id: str, moment: datetime) -> None:
    """Shown from now on (its start task is READY in the same transaction)."""
    await conn.execute(
        update(C).where(C.c.id == conversation_id).values(started=True, updated_at=moment)
    )


async def remove(conn: AsyncConnection, conversation_id: str) -> None:
    await conn.execute(delete(C).where(C.c.id == conversation_id))


async def children(db: Database, ids: list[str]) -> dict[str, list[str]]:
    """The sub-conversations of each of `ids` (by their parent_conversation_id)."""
    if not ids:
        return {}
    found: dict[str, list[str]] = {}
    query = (
        select(C.c.parent_conversation_id, C.c.id)
        .where(C.c.parent_conversation_id.in_(ids), C.c.started.is_(True))
        .order_by(C.c.created_at)
    )
    async with db.connect() as conn:
        for parent, child in await conn.execute(query):
            found.setdefault(parent, []).append(child)
    return found


async def in_sandbox(db: Database, sandbox_id: str) -> list[str]:
    async with db.connect() as conn:
        return list(await conn.scalars(select(C.c.id).where(C.c.sandbox_id == sandbox_id)))


#: A run going on: the agent's steps, or actions waiting for the user's confirmation.
RUN_UNDER_WAY = (ExecutionStatus.RUNNING, ExecutionStatus.WAITING_FOR_CONFIRMATION)


async def end_runs(
    conn: AsyncConnection, sandbox_id: str, status: str, moment: datetime
) -> list[str]:
    """The conversations of the sandbox whose run was going on (RUNNING, or waiting for a
    confirmation), now `status`; their ids."""
    ended = await conn.scalars(
        update(C)
        .where(
            C.c.sandbox_id == sandbox_id,
            C.c.execution_status.in_([stored_status(s) for s in RUN_UNDER_WAY]),
        )
        .values(execution_status=status, updated_at=moment)
        .returning(C.c.id)
    )
    return list(ended)


async def to_resume(db: Database, sandbox_id: str) -> list[str]:
    """Conversations whose run was paused with the sandbox (see `control_plane.runs`)."""
    async with db.connect() as conn:
        return list(
            await conn.scalars(
                select(C.c.id).where(C.c.sandbox_id == sandbox_id, C.c.resume_run.is_(True))
            )
        )
