"""Closing a SQLite connection whose thread SQLAlchemy already stopped (its terminate: a
connection invalidated, or one whose graceful close was cancelled) ends at once: aiosqlite's
close stopped the thread a second time and awaited an answer from a thread that had ended,
so the closing task stayed pending until the loop went and was destroyed ("Task was destroyed
but it is pending" in the control plane's log)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from control_plane.store import Database
from control_plane.store.db import SteadyConnection

#: Seconds a close may take: far beyond one that works, so only a hang fails the test.
BOUND = 30


async def test_a_connection_closed_after_a_terminate_ends(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'cp.db'}")
    await db.migrate()
    async with db.engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        assert isinstance(raw, SteadyConnection)
        stopping = raw.stop()  # SQLAlchemy's force close
        assert stopping is not None
        closing = asyncio.ensure_future(raw.close())  # then its close, or Database.close's
        done, _ = await asyncio.wait({closing}, timeout=BOUND)
        assert done == {closing}, "close() waited on a thread that had ended"
        with contextlib.suppress(ValueError):  # aiosqlite's "Connection closed"
            closing.result()
        await stopping
        assert raw._connection is None  # the thread closed it as it ended
    await db.close()
