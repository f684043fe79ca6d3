"""Start-task rows: the stored stages of a conversation start (the request itself encrypted)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from control_plane.models import StartTaskStatus, now
from control_plane.store.db import Database
from control_plane.store.tables import start_tasks as T


@dataclass(frozen=True)
class TaskRow:
    id: str
    user_id: str
    status: StartTaskStatus
    detail: str | None
    request_enc: str
    app_conversation_id: str | None
    sandbox_id: str | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: Any) -> TaskRow:
        data = dict(row._mapping)
        data["status"] = StartTaskStatus(data["status"])
        return cls(**data)


async def insert(db: Database, task_id: str, user_id: str, request_enc: str) -> TaskRow:
    moment = now()
    task = TaskRow(id=task_id, user_id=user_id, status=StartTaskStatus.WORKING, detail=None,
                   request_enc=request_enc, app_conversation_id=None, sandbox_id=None,
                   created_at=moment, updated_at=moment)
    async with db.begin() as conn:
        await conn.execute(T.insert().values(**{**task.__dict__, "status": task.status.value}))
    return task


async def get_many(db: Database, ids: list[str], user_id: str) -> dict[str, TaskRow]:
    async with db.connect() as conn:
        result = await conn.execute(select(T).where(T.c.id.in_(ids), T.c.user_id == user_id))
        return {r.id: r for r in (TaskRow.of(x) for x in result)}


async def unfinished(db: Database) -> list[TaskRow]:
    async with db.connect() as conn:
        result = await conn.execute(select(T).where(T.c.status.not_in(
            [StartTaskStatus.READY.value, StartTaskStatus.ERROR.value])).order_by(T.c.created_at))
        return [TaskRow.of(x) for x in result]


async def set_status(db: Database | AsyncConnection, task_id: str, status: StartTaskStatus,
                     detail: str | None = None, **values: Any) -> None:
    query = update(T).where(T.c.id == task_id).values(status=status.value, detail=detail,
                                                       updated_at=now(), **values)
    if isinstance(db, AsyncConnection):
        await db.execute(query)
        return
    async with db.begin() as conn:
        await conn.execute(query)
