"""Users, their API keys (hashed) and their settings (secrets encrypted by the caller)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
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
        row = (await conn.execute(select(users.c.id, users.c.name).where(users.c.name == name))).first()
        if row is not None:
            return User(row.id, row.name)
        user = User(str(uuid.uuid4()), name)
        await conn.execute(users.insert().values(id=user.id, name=name, placement_seq=0,
                                                 created_at=db.now()))
        return user


async def add_key(db: Database, user: User, key_hash: str) -> None:
    async with db.begin() as conn:
        await conn.execute(api_keys.insert().values(id=str(uuid.uuid4()), user_id=user.id,
                                                    key_hash=key_hash, created_at=db.now()))


async def user_by_key_hash(db: Database, key_hash: str) -> User | None:
    async with db.connect() as conn:
        row = (await conn.execute(
            select(users.c.id, users.c.name).join(api_keys, api_keys.c.user_id == users.c.id)
            .where(api_keys.c.key_hash == key_hash)
        )).first()
    return None if row is None else User(row.id, row.name)


async def lock_user(conn: AsyncConnection, user_id: str) -> None:
    """Serialize this user's placements: a write on their row, taken first in the transaction.

    PostgreSQL holds the row lock to commit; SQLite takes its database write lock here, before
    any read, so two placements never both read the same free slot.
    """
    await conn.execute(update(users).where(users.c.id == user_id)
                       .values(placement_seq=users.c.placement_seq + 1))


async def get_settings(db: Database, user_id: str) -> StoredSettings:
    async with db.connect() as conn:
        row = (await conn.execute(select(user_settings).where(user_settings.c.user_id == user_id))).first()
    if row is None:
        return StoredSettings({}, None, None, None)
    return StoredSettings(dict(row.data), row.llm_api_key_enc, row.secrets_enc, row.updated_at)


async def put_settings(db: Database, user_id: str, settings: StoredSettings) -> None:
    values = {"data": settings.data, "llm_api_key_enc": settings.llm_api_key_enc,
              "secrets_enc": settings.secrets_enc, "updated_at": db.now()}
    async with db.begin() as conn:
        done = await conn.execute(update(user_settings).where(user_settings.c.user_id == user_id)
                                  .values(**values))
        if done.rowcount == 0:
            await conn.execute(user_settings.insert().values(user_id=user_id, **values))
