"""Users, their API keys (hashed) and their settings (secrets encrypted by the caller)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from control_plane.models import User
from control_plane.store.db import Database
from control_plane.store.tables import api_keys, user_settings, users


@dataclass(frozen=True)
class StoredSettings:
    data: dict[str, Any]
    llm_api_key_enc: str | None
    secrets_enc: str | None
    updated_at: datetime | None


async def get_or_create_user(db: Database, name: str) -> User:
    async with db.begin() as conn:
        row = (
            await conn.execute(select(users.c.id, users.c.name).where(users.c.name == name))
        ).first()
        if row is not None:
            return User(row.id, row.name)
        user = User(str(uuid.uuid4()), name)
        await conn.execute(
            users.insert().values(id=user.id, name=name, placement_seq=0, created_at=db.now())
        )
        return user


async def add_key(db: Database, user: User, key_hash: str) -> None:
    async with db.begin() as conn:
        await conn.execute(
            api_keys.insert().values(
                id=str(uuid.uuid4()), user_id=user.id, key_hash=key_hash, created_at=db.now()
            )
        )


async def user_by_key_hash(db: Database, key_hash: str) -> User | None:
    async with db.connect() as conn:
        row = (
            await conn.execute(
                select(users.c.id, users.c.name)
                .join(api_keys, api_keys.c.user_id == users.c.id)
                .where(api_keys.c.key_hash == key_hash)
            )
        ).first()
    return None if row is None else User(row.id, row.name)


@dataclass(frozen=True)
class StoredKey:
    """An API key as an operator sees it: never the key, nor its hash."""

    id: str
    user: str
    created_at: datetime


async def list_keys(db: Database, user: str | None = None) -> list[StoredKey]:
    query = (
        select(api_keys.c.id, users.c.name, api_keys.c.created_at)
        .join(users, api_keys.c.user_id == users.c.id)
        .order_by(users.c.name, api_keys.c.created_at)
    )
    if user is not None:
        query = query.where(users.c.name == user)
    async with db.connect(aside=True) as conn:
        return [StoredKey(r.id, r.name, r.created_at) for r in await conn.execute(query)]


async def delete_keys(db: Database, *, key_id: str | None = None, user: str | None = None) -> int:
    """Delete one key (by id) or every key of a user: the lookup of each request reads this
    table, so every control plane on the database refuses them from the next request on."""
    query = delete(api_keys)
    if key_id is not None:
        query = query.where(api_keys.c.id == key_id)
    if user is not None:
        query = query.where(api_keys.c.user_id.in_(select(users.c.id).where(users.c.name == user)))
    async with db.begin() as conn:
        return int((await conn.execute(query)).rowcount or 0)


async def lock_user(conn: AsyncConnection, user_id: str) -> None:
    """Serialize this user's placements: a write on their row, taken first in the transaction.

    PostgreSQL holds the row lock to commit; SQLite takes its database write lock here, before
    any read, so two placements never both read the same free slot.
    """
    await conn.execute(
        update(users).where(users.c.id == user_id).values(placement_seq=users.c.placement_seq + 1)
    )


async def get_settings(db: Database, user_id: str) -> StoredSettings:
    async with db.connect() as conn:
        row = (
            await conn.execute(select(user_settings).where(user_settings.c.user_id == user_id))
        ).first()
    if row is None:
        return StoredSettings({}, None, None, None)
    return StoredSettings(dict(row.data), row.llm_api_key_enc, row.secrets_enc, row.updated_at)


async def put_settings(db: Database, user_id: str, settings: StoredSettings) -> None:
    values = {
        "data": settings.data,
        "llm_api_key_enc": settings.llm_api_key_enc,
        "secrets_enc": settings.secrets_enc,
        "updated_at": db.now(),
    }
    async with db.begin() as conn:
        done = await conn.execute(
            update(user_settings).where(user_settings.c.user_id == user_id).values(**values)
        )
        if done.rowcount == 0:
            await conn.execute(user_settings.insert().values(user_id=user_id, **values))
