"""The audit log's table (migration 0009) on SQLite and on a real PostgreSQL: made by the
upgrade and taken back by the downgrade, and append-only in the database itself (an UPDATE, a
DELETE, and on PostgreSQL a TRUNCATE, refused whoever sends them)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.expression import Executable

from control_plane.audit import AuditLog, AuditQuery
from control_plane.store import Database
from control_plane.store import audit as rows
from control_plane.store.tables import audit_log
from tests.control_plane.store.test_migrations import migrate

pytestmark = [pytest.mark.asyncio, pytest.mark.e2e]  # a real PostgreSQL server


async def tables(db: Database) -> set[str]:
    async with db.connect() as conn:
        return set(await conn.run_sync(lambda sync: sa.inspect(sync).get_table_names()))


async def test_the_migration_makes_an_append_only_table_and_takes_it_back(
    database_url: str,
) -> None:
    db = Database(database_url)
    try:
        await migrate(db, "0008")
        assert "audit_log" not in await tables(db)
        await db.migrate()
        assert "audit_log" in await tables(db)
        log = AuditLog(db)
        await log.record(
            actor="cli", action="api_key.create", target_kind="user", target_id="u1", source="cli"
        )
        [entry] = await log.search(AuditQuery(), 10)
        assert (entry.actor, entry.action, entry.target_id) == ("cli", "api_key.create", "u1")

        refusals: list[Executable] = [
            sa.update(audit_log).values(actor="someone else"),
            sa.delete(audit_log),
        ]
        if db.dialect == "postgresql":
            refusals.append(sa.text("TRUNCATE audit_log"))
        for statement in refusals:
            with pytest.raises(DBAPIError, match="append-only"):
                async with db.begin() as conn:
                    await conn.execute(statement)
        assert [e.id for e in await log.search(AuditQuery(), 10)] == [entry.id]

        await migrate(db, "0008", down=True)
        assert "audit_log" not in await tables(db)
        await db.migrate()  # and up again, triggers and all
        async with db.begin() as conn:
            await rows.insert(conn, db, {**_values(db), "actor": "again"})
        with pytest.raises(DBAPIError, match="append-only"):
            async with db.begin() as conn:
                await conn.execute(sa.delete(audit_log))
    finally:
        await db.close()


def _values(db: Database) -> dict[str, object]:
    return {
        "id": str(uuid.uuid4()),
        "at": db.now(),
        "actor": "system",
        "action": "sandbox.pause",
        "target_kind": "sandbox",
        "target_id": "s1",
        "source": "local",
        "user_id": None,
        "details": None,
    }


async def test_a_write_tried_again_is_stored_once_and_pages_never_shift(
    database_url: str,
) -> None:
    db = Database(database_url)
    try:
        await db.migrate()
        values = _values(db)
        await rows.append(db, values)
        await rows.append(db, values)  # the same record again (a retry after a failure)
        assert len(await rows.search(db, AuditQuery(), 10)) == 1
        for i in range(4):
            await rows.append(db, {**_values(db), "target_id": f"s{i + 2}"})
        first = await rows.search(db, AuditQuery(), 2)
        assert [e.target_id for e in first] == ["s5", "s4"]
        await rows.append(db, {**_values(db), "target_id": "later"})  # appended meanwhile
        second = await rows.search(db, AuditQuery(before_seq=first[-1].seq), 2)
        assert [e.target_id for e in second] == ["s3", "s2"]
        assert [e.target_id for e in await rows.search(db, AuditQuery(action="sandbox.*"), 1)] == [
            "later"
        ]
        assert await rows.search(db, AuditQuery(action="sandbox"), 10) == []
        later = db.now() + timedelta(hours=1)
        assert await rows.search(db, AuditQuery(since=later), 10) == []
    finally:
        await db.close()


async def test_details_are_masked_and_bounded(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path}/audit.db")
    try:
        await db.migrate()
        log = AuditLog(db)
        await log.record(
            actor="u",
            action="settings.update",
            target_kind="user",
            target_id="u",
            source="127.0.0.1",
            details={"api_key": "sk-plain", "note": "the value hunter2-xyz inside", "n": 1},
            secrets=["hunter2-xyz"],
        )
        await log.record(
            actor="u" * 500,
            action="x",
            target_kind="k",
            target_id=None,
            source="s",
            details={"blob": "y" * 100_000},
        )
        big, masked = await log.search(AuditQuery(), 10)
        assert masked.details is not None
        assert "sk-plain" not in str(masked.details) and "hunter2-xyz" not in str(masked.details)
        assert masked.details["n"] == 1
        assert len(big.actor) == 80
        assert big.details is not None and big.details["truncated"] is True
        assert len(str(big.details)) < 5000
    finally:
        await db.close()
