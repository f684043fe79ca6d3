"""SQLite statements run on the event loop's thread, but nothing that may wait does: a write
waiting for the lock another process holds, and a read marked long (`aside`: its cost grows
with what a user stored), go to the connection's thread while the loop serves every other
task."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.pool import QueuePool

from control_plane.store import Database, accounts
from control_plane.store.tables import users

pytestmark = pytest.mark.asyncio

#: Seconds a held statement waits to be let go: far beyond a working test, so only a loop
#: that could not let it go (the statement holding the loop itself) reaches it.
HELD = 10.0


async def _database(tmp_path: Path) -> tuple[Database, str]:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'cp.db'}", busy_timeout=30)
    await db.migrate()
    return db, (await accounts.get_or_create_user(db, "loop")).id


async def test_a_write_waiting_for_another_process_holds_up_no_other_task(
    tmp_path: Path,
) -> None:
    """Another process (`control-plane keys create`) holds the write lock: this process's
    write waits for it, while reads go on; once it lets go, the write commits."""
    db, user_id = await _database(tmp_path)
    other = sqlite3.connect(tmp_path / "cp.db", timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")

        async def write() -> None:
            async with db.begin() as conn:
                await conn.execute(update(users).where(users.c.id == user_id).values(name="new"))

        writing = asyncio.create_task(write())
        while db._holder is not writing:  # in its transaction: its BEGIN is next
            await asyncio.sleep(0)
        for _ in range(50):  # the loop turns meanwhile, and each read is answered
            async with db.connect() as conn:
                assert await conn.scalar(select(users.c.name).where(users.c.id == user_id)) == (
                    "loop"
                )
        assert not writing.done()  # still waiting, neither failed nor through
        other.execute("COMMIT")
        await writing
        async with db.connect() as conn:
            assert await conn.scalar(select(users.c.name).where(users.c.id == user_id)) == "new"
    finally:
        other.close()
        await db.close()


async def test_a_read_marked_long_runs_off_the_loop(tmp_path: Path) -> None:
    """A read made `aside` that does not end until the loop says so (a stand-in for a search
    through a long conversation's events) ends, and a read made meanwhile is answered first."""
    db, user_id = await _database(tmp_path)
    inside, go = threading.Event(), threading.Event()
    order: list[str] = []

    def held() -> int:
        inside.set()
        go.wait(HELD)
        order.append("held statement ended")
        return 1

    try:
        async with db.connect(aside=True) as conn:
            raw = (await conn.get_raw_connection()).driver_connection
            assert raw is not None
            raw._conn.create_function("held", 0, held)

            async def long() -> None:
                await conn.execute(text("SELECT held()"))

            running = asyncio.create_task(long())
            while not inside.is_set():
                await asyncio.sleep(0.001)
            async with db.connect() as other:
                await other.scalar(select(users.c.name).where(users.c.id == user_id))
                order.append("read answered")
            go.set()
            await running
        assert order == ["read answered", "held statement ended"]
    finally:
        go.set()
        await db.close()


async def test_connections_past_the_pool_are_closed_cleanly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Twenty reads at once: the pool keeps five connections and closes the others as they
    come back (on their thread, after anything they still run there), with no error logged."""
    db, user_id = await _database(tmp_path)
    release = asyncio.Event()

    async def read() -> None:
        async with db.connect() as conn:
            await release.wait()
            await conn.scalar(select(users.c.name).where(users.c.id == user_id))

    try:
        with caplog.at_level(logging.WARNING):
            reads = [asyncio.create_task(read()) for _ in range(20)]
            pool = cast(QueuePool, db.engine.pool)
            while pool.checkedout() < 15:  # the pool's five and its overflow of ten are all out
                await asyncio.sleep(0.001)
            release.set()
            await asyncio.gather(*reads)
        assert [r.getMessage() for r in caplog.records] == []
    finally:
        await db.close()
