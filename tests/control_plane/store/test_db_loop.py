"""SQLite statements run on the event loop's thread, but nothing that may wait does: a write
waiting for the lock another process holds, a read marked long (`aside`: its cost grows with
what a user stored), and the WAL's checkpoints go to a thread while the loop serves every
other task."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import QueuePool

from control_plane.store import Database, accounts
from control_plane.store.db import PAGE_BYTES, WAL_PAGES, describe, transient
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


async def test_a_write_that_waits_out_the_busy_timeout_fails_as_a_failure_that_passes(
    tmp_path: Path,
) -> None:
    """Another process keeps the write lock past this one's wait: the write's BEGIN fails as
    SQLAlchemy's OperationalError in SQLite's words, which passes (`transient`: a client is
    told 503 and an idempotent write is tried again), not as the driver's own error, which
    nothing here expects; once the lock is let go, the next write goes through."""
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'cp.db'}", busy_timeout=0.2)
    await db.migrate()
    user_id = (await accounts.get_or_create_user(db, "busy")).id
    other = sqlite3.connect(tmp_path / "cp.db", timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(OperationalError) as failed:
            async with db.begin() as conn:
                await conn.execute(update(users).where(users.c.id == user_id).values(name="x"))
        assert transient(failed.value)
        assert "database is locked" in describe(failed.value)
        other.execute("ROLLBACK")
        async with db.begin() as conn:
            await conn.execute(update(users).where(users.c.id == user_id).values(name="x"))
        async with db.connect() as conn:
            assert await conn.scalar(select(users.c.name).where(users.c.id == user_id)) == "x"
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


async def test_commits_run_on_the_loop_and_the_wal_is_checkpointed_aside(tmp_path: Path) -> None:
    """Writes of six times the WAL's checkpoint length: each COMMIT runs on the loop's thread
    (it only appends to the WAL), and the WAL does not grow past its length for long: the
    checkpoints made aside bring its pages into the database, and it starts again small."""
    db, _ = await _database(tmp_path)
    wal = tmp_path / "cp.db-wal"
    loop_thread = threading.get_ident()
    commits: list[int] = []
    row = b"x" * 4000

    def traced(statement: str) -> None:
        if statement == "COMMIT":
            commits.append(threading.get_ident())

    try:
        async with db.begin() as conn:
            await conn.execute(text("CREATE TABLE scratch (data BLOB)"))
            raw = (await conn.get_raw_connection()).driver_connection
            assert raw is not None
            raw._conn.set_trace_callback(traced)  # the pool hands this connection out again
        for _ in range(6 * WAL_PAGES // 50):
            async with db.begin() as conn:
                await conn.execute(text("INSERT INTO scratch VALUES (:data)"), [{"data": row}] * 50)
        written = 6 * WAL_PAGES
        for _ in range(5):  # the last checkpoint over, the next write starts the WAL again
            assert db._checkpoints is not None
            await db._checkpoints.close()
            async with db.begin() as conn:
                await conn.execute(text("INSERT INTO scratch VALUES (x'00')"))
            written += 1
            if wal.stat().st_size < WAL_PAGES * PAGE_BYTES:
                break
        assert wal.stat().st_size < WAL_PAGES * PAGE_BYTES
        assert (tmp_path / "cp.db").stat().st_size > 5 * WAL_PAGES * PAGE_BYTES
        assert len(commits) > 6 * WAL_PAGES // 50
        assert set(commits) == {loop_thread}
        async with db.connect() as conn:
            assert await conn.scalar(text("SELECT count(*) FROM scratch")) == written
    finally:
        await db.close()
