"""The database: one async engine (SQLite through aiosqlite, or PostgreSQL through asyncpg),
its Alembic migrations applied at start, and the few statements that differ by dialect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Connection, Table, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql.dml import Insert

from core.retry import Clock

MIGRATIONS = Path(__file__).with_name("migrations")
#: The advisory lock key that serializes migrations on PostgreSQL (any constant of this app's).
MIGRATION_LOCK = 0x636F6E74726F6C


def _sqlite_pragmas(dbapi_connection: Any, record: Any) -> None:
    # WAL lets searches read while the webhook writes; NORMAL sync is durable at checkpoints and
    # never corrupts; the busy timeout makes concurrent writers wait instead of failing.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


class Database:
    """The engine and its dialect, and the clock of stored times; every query module takes one
    of these.

    `clock` is the time of every stored record and of the timers that read them (the
    lifecycle's idle time, the 12-hour cap, the deletion time): one clock for both, so a test
    that moves it on sees the timers come due. Lease times are not on it (`store.leases`)."""

    def __init__(self, url: str, clock: Clock | None = None) -> None:
        self.url = url
        self.clock = clock or Clock()
        if url.startswith("sqlite"):
            Path(url.split(":///", 1)[1]).parent.mkdir(parents=True, exist_ok=True)
            self.engine: AsyncEngine = create_async_engine(url, connect_args={"timeout": 30})
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)
        else:
            self.engine = create_async_engine(url, pool_size=10, max_overflow=20,
                                              pool_pre_ping=True)
        self.dialect = self.engine.dialect.name

    def now(self) -> datetime:
        """The clock's time as stored: aware UTC."""
        return datetime.fromtimestamp(self.clock.time(), UTC)

    async def migrate(self) -> None:
        """Alembic upgrade to head, on this engine (no alembic.ini, no separate step).

        On PostgreSQL several control planes may start at once: a transaction-scoped advisory
        lock makes them migrate one after the other (the later ones find nothing to do)."""
        async with self.engine.begin() as conn:
            if self.dialect == "postgresql":
                await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            await conn.run_sync(_upgrade)

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncConnection]:
        """One transaction: committed when the block ends, rolled back on an exception."""
        async with self.engine.begin() as conn:
            yield conn

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[AsyncConnection]:
        """Reads without a transaction of their own."""
        async with self.engine.connect() as conn:
            yield conn

    def insert_ignoring_duplicates(self, table: Table) -> Insert:
        """INSERT that skips rows clashing with a unique key (idempotent webhook inserts)."""
        if self.dialect == "postgresql":
            return postgresql.insert(table).on_conflict_do_nothing()
        return sqlite.insert(table).on_conflict_do_nothing()

    async def close(self) -> None:
        await self.engine.dispose()


def _upgrade(connection: Connection) -> None:
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
