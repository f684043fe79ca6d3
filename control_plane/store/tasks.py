"""Start-task rows: the stored stages of a conversation start (the request itself encrypted)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from control_plane.models import START_MOVES, StartTaskStatus, TaskRow
from control_plane.store import leases
from control_plane.store.db import Database
from control_plane.store.tables import leases as L
from control_plane.store.tables import start_tasks as T

#: The kind of a start task's lease (`store.leases`).
LEASE = "start-task"


class LeaseLost(Exception):
    """Another control plane took this task over: this one stops working on it."""


def _row(row: Any) -> TaskRow:
    data = dict(row._mapping)
    data["status"] = StartTaskStatus(data["status"])
    return TaskRow(**data)


async def insert(
    db: Database, task_id: str, user_id: str, request_enc: str, conn: AsyncConnection
) -> TaskRow:
    """The new task's row, in the caller's transaction (its lease comes with it)."""
    moment = db.now()
    task = TaskRow(
        id=task_id,
        user_id=user_id,
        status=StartTaskStatus.WORKING,
        detail=None,
        request_enc=request_enc,
        app_conversation_id=None,
        sandbox_id=None,
        created_at=moment,
        updated_at=moment,
    )
    await conn.execute(T.insert().values(**{**task.__dict__, "status": task.status.value}))
    return task


async def get_many(db: Database, ids: list[str], user_id: str) -> dict[str, TaskRow]:
    async with db.connect() as conn:
        result = await conn.execute(select(T).where(T.c.id.in_(ids), T.c.user_id == user_id))
        return {r.id: r for r in (_row(x) for x in result)}


async def get(db: Database, task_id: str) -> TaskRow | None:
    async with db.connect() as conn:
        return await get_in(conn, task_id)


async def get_in(conn: AsyncConnection, task_id: str) -> TaskRow | None:
    """Read inside the caller's transaction (placement)."""
    row = (await conn.execute(select(T).where(T.c.id == task_id))).first()
    return None if row is None else _row(row)


async def orphans(db: Database, holder: str, limit: int = 100) -> list[TaskRow]:
    """Unfinished tasks nobody works on: never leased, or their holder let the lease expire
    (it died), or leased by `holder` itself (the caller skips those it is working on: on
    SQLite a restarted process has the same holder id). Oldest first, at most `limit`."""
    query = (
        select(T)
        .outerjoin(L, and_(L.c.kind == LEASE, L.c.key == T.c.id))
        .where(
            T.c.status.not_in([StartTaskStatus.READY.value, StartTaskStatus.ERROR.value]),
            or_(L.c.key.is_(None), L.c.expires_at < leases.wall(), L.c.holder == holder),
        )
        .order_by(T.c.created_at)
        .limit(limit)
    )
    async with db.connect() as conn:
        return [_row(x) for x in await conn.execute(query)]


async def sweep_leases(db: Database) -> int:
    """Delete the expired leases of finished tasks; how many. A holder releases its lease when
    a task ends, but one killed between storing READY (or ERROR) and the release leaves the row
    behind, and nothing else would ever look at it again: `orphans` takes unfinished tasks
    only. A finished task has no more stages to write, so no holder can still need it."""
    finished = select(T.c.id).where(
        T.c.status.in_([StartTaskStatus.READY.value, StartTaskStatus.ERROR.value])
    )
    async with db.begin() as conn:
        done = await conn.execute(
            delete(L).where(
                L.c.kind == LEASE, L.c.expires_at < leases.wall(), L.c.key.in_(finished)
            )
        )
    return int(done.rowcount)


async def set_status(
    db: Database,
    task_id: str,
    status: StartTaskStatus,
    detail: str | None = None,
    *,
    holder: str | None = None,
    conn: AsyncConnection | None = None,
    **values: Any,
) -> TaskRow | None:
    """Store a stage, only on a row whose stage may move to it (`models.START_STAGES`: a
    finished task is never written again); with `holder`, only while it holds the task's
    lease (LeaseLost otherwise); with `conn`, inside the caller's transaction.
    InvalidTransition for a move the table does not list. The row as written (None: there
    is no such task)."""
    query = update(T).where(
        T.c.id == task_id, T.c.status.in_([s.value for s in START_MOVES.sources(status)])
    )
    if holder is not None:
        query = query.where(leases.held(LEASE, task_id, holder))
    query = query.values(
        status=status.value, detail=detail, updated_at=db.now(), **values
    ).returning(T)
    if conn is not None:
        return await _written(conn, await conn.execute(query), task_id, status, holder)
    async with db.begin() as own:
        return await _written(own, await own.execute(query), task_id, status, holder)


async def _written(
    conn: AsyncConnection, done: Any, task_id: str, status: StartTaskStatus, holder: str | None
) -> TaskRow | None:
    """The row written; or why a stage was not written: its move, or the lease."""
    if (written := done.first()) is not None:
        return _row(written)
    now = await get_in(conn, task_id)
    if now is not None and status not in START_MOVES[now.status]:
        raise START_MOVES.refused(
            now.status,
            status,
            f"start task {task_id} is {now.status.value}: it cannot go to {status.value}",
        )
    if holder is not None:
        raise LeaseLost(f"start task {task_id} is another control plane's now")
    return None


def _matching(query: Any, user_id: str, created_at_gte: Any, conversation_id: str | None) -> Any:
    query = query.where(T.c.user_id == user_id)
    if created_at_gte is not None:
        query = query.where(T.c.created_at >= created_at_gte)
    if conversation_id is not None:
        query = query.where(T.c.app_conversation_id == conversation_id)
    return query


async def search(
    db: Database,
    user_id: str,
    *,
    created_at_gte: Any = None,
    conversation_id: str | None = None,
    order: str = "CREATED_AT_DESC",
    limit: int = 100,
    offset: int = 0,
) -> list[TaskRow]:
    """The user's tasks matching, in `order` (CREATED_AT, UPDATED_AT, either _DESC)."""
    column = T.c.updated_at if order.startswith("UPDATED") else T.c.created_at
    desc = order.endswith("_DESC")
    query = _matching(select(T), user_id, created_at_gte, conversation_id).order_by(
        column.desc() if desc else column.asc(), T.c.id.desc() if desc else T.c.id.asc()
    )
    async with db.connect(aside=True) as conn:
        return [_row(x) for x in await conn.execute(query.limit(limit).offset(offset))]


async def count(
    db: Database, user_id: str, *, created_at_gte: Any = None, conversation_id: str | None = None
) -> int:
    query = _matching(select(func.count()).select_from(T), user_id, created_at_gte, conversation_id)
    async with db.connect(aside=True) as conn:
        return int(await conn.scalar(query) or 0)


async def started_here(db: Database, conversation_id: str) -> bool:
    """Whether a start task of this control plane placed this conversation (its row may be
    gone since: deleted, or the start failed)."""
    async with db.connect() as conn:
        found = await conn.scalar(
            select(T.c.id).where(T.c.app_conversation_id == conversation_id).limit(1)
        )
    return found is not None


async def unfinished_by_stage(db: Database) -> dict[str, int]:
    """The start tasks not yet READY or ERROR, counted by stage: the queue."""
    done = (StartTaskStatus.READY.value, StartTaskStatus.ERROR.value)
    query = select(T.c.status, func.count()).where(T.c.status.not_in(done)).group_by(T.c.status)
    async with db.connect() as conn:
        return {status: n for status, n in await conn.execute(query)}
