"""The store on SQLite and on a real PostgreSQL: migrations, idempotent events, secrets at rest,
hashed keys, and placement that never overfills a sandbox under concurrent starts."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import select, text, update

from control_plane import grouping
from control_plane.crypto import Cipher, hash_key
from control_plane.models import (
    EventFilters,
    GroupingStrategy,
    InvalidTransition,
    SandboxReason,
    SandboxStatus,
    StartTaskStatus,
)
from control_plane.settings import SettingsPatch, SettingsService
from control_plane.store import Database, accounts, conversations, events, sandboxes, tasks
from control_plane.store.db import DatabaseClosed, transient
from control_plane.store.tables import api_keys, metadata, user_settings, users

pytestmark = [pytest.mark.asyncio, pytest.mark.e2e]  # a real PostgreSQL server


@pytest.fixture
async def db(database_url: str) -> Database:
    database = Database(database_url)
    await database.migrate()
    yield database  # type: ignore[misc]
    await database.close()


async def test_migrations_create_exactly_the_tables(db: Database) -> None:
    async with db.connect() as conn:
        diff = await conn.run_sync(
            lambda sync: compare_metadata(MigrationContext.configure(sync), metadata)
        )
    assert diff == []
    await db.migrate()  # applying again at the next start changes nothing


async def test_api_keys_are_stored_hashed(db: Database) -> None:
    user = await accounts.get_or_create_user(db, "alice")
    await accounts.add_key(db, user, hash_key("cp_secret"))
    async with db.connect() as conn:
        stored = list(await conn.scalars(select(api_keys.c.key_hash)))
    assert stored == [hash_key("cp_secret")] and "cp_secret" not in stored[0]
    assert await accounts.user_by_key_hash(db, hash_key("cp_secret")) == user
    assert await accounts.user_by_key_hash(db, hash_key("cp_other")) is None
    assert await accounts.get_or_create_user(db, "alice") == user


async def test_llm_key_and_secrets_are_encrypted_at_rest(db: Database, tmp_path: Path) -> None:
    user = await accounts.get_or_create_user(db, "bob")
    service = SettingsService(db, Cipher.for_config(None, tmp_path))
    await service.patch(
        user.id,
        SettingsPatch.model_validate(
            {"llm_model": "m", "llm_api_key": "sk-very-secret", "secrets": {"TOKEN": "tok-123"}}
        ),
    )
    async with db.connect() as conn:
        row = (await conn.execute(select(user_settings))).one()
    assert "sk-very-secret" not in json.dumps([str(v) for v in row])
    assert "tok-123" not in json.dumps([str(v) for v in row])
    loaded = await service.get(user.id)
    assert loaded.llm_api_key == "sk-very-secret" and loaded.secrets == {"TOKEN": "tok-123"}
    assert (tmp_path / "secret.key").stat().st_mode & 0o777 == 0o600
    view = loaded.view()
    assert view.llm_api_key == "**********" and view.secret_names == ["TOKEN"]
    await service.patch(user.id, SettingsPatch.model_validate({"secrets": {"TOKEN": None}}))
    assert (await service.get(user.id)).secrets == {}


async def _sandbox(
    db: Database, user_id: str, name: str, status: SandboxStatus, age: int, idle: int
) -> str:
    async with db.begin() as conn:
        row = await sandboxes.insert(
            conn,
            db.now(),
            id=name,
            user_id=user_id,
            spec_id="process",
            status=status.value,
            session_key_hash=hash_key(name),
            session_key_enc="x",
            root_dir=f"/nowhere/{name}",
            created_at=db.now() - timedelta(minutes=age),
            last_activity_at=db.now() - timedelta(minutes=idle),
        )
    return row.id


async def _conversation(db: Database, user_id: str, sandbox_id: str, cid: str) -> None:
    async with db.begin() as conn:
        await conversations.insert(
            conn, db.now(), id=cid, user_id=user_id, sandbox_id=sandbox_id, working_dir="/w"
        )


async def test_each_strategy_picks_the_sandbox_spec_1_says(db: Database) -> None:
    user = await accounts.get_or_create_user(db, "carol")
    other = await accounts.get_or_create_user(db, "dave")
    # old: oldest, 3 conversations, used 1 min ago; mid: 1 conversation, used 30 min ago;
    # new: newest, 2 conversations, used 10 min ago; full: at the cap; paused; another user's.
    old = await _sandbox(db, user.id, "old", SandboxStatus.RUNNING, age=60, idle=1)
    mid = await _sandbox(db, user.id, "mid", SandboxStatus.RUNNING, age=40, idle=30)
    new = await _sandbox(db, user.id, "new", SandboxStatus.RUNNING, age=20, idle=10)
    full = await _sandbox(db, user.id, "full", SandboxStatus.RUNNING, age=5, idle=50)
    await _sandbox(db, user.id, "paused", SandboxStatus.PAUSED, age=1, idle=100)
    await _sandbox(db, other.id, "theirs", SandboxStatus.RUNNING, age=2, idle=100)
    for sandbox, n in ((old, 3), (mid, 1), (new, 2), (full, 4)):
        for i in range(n):
            await _conversation(db, user.id, sandbox, f"{sandbox}-{i}")
    async with db.connect() as conn:
        available = await grouping.candidates(conn, user.id, "process", cap=4)
    assert [c.id for c in available] == [old, mid, new]
    assert grouping.choose(GroupingStrategy.NO_GROUPING, available) is None
    assert grouping.choose(GroupingStrategy.GROUP_BY_NEWEST, available) == new
    assert grouping.choose(GroupingStrategy.LEAST_RECENTLY_USED, available) == mid
    assert grouping.choose(GroupingStrategy.FEWEST_CONVERSATIONS, available) == mid
    assert grouping.choose(GroupingStrategy.ADD_TO_ANY, available) == old
    assert grouping.choose(GroupingStrategy.ADD_TO_ANY, []) is None


async def test_concurrent_placements_never_overfill(db: Database) -> None:
    """20 starts at once onto two sandboxes with room for 3 each: exactly 6 join them."""
    user = await accounts.get_or_create_user(db, "erin")
    a = await _sandbox(db, user.id, "a", SandboxStatus.RUNNING, age=10, idle=1)
    b = await _sandbox(db, user.id, "b", SandboxStatus.RUNNING, age=5, idle=1)
    await _conversation(db, user.id, a, "a-0")

    async def place(i: int) -> str | None:
        async with db.begin() as conn:
            await accounts.lock_user(conn, user.id)
            chosen = grouping.choose(
                GroupingStrategy.FEWEST_CONVERSATIONS,
                await grouping.candidates(conn, user.id, "process", cap=4),
            )
            if chosen is not None:
                await conversations.insert(
                    conn, db.now(), id=f"c{i}", user_id=user.id, sandbox_id=chosen, working_dir="/w"
                )
            return chosen

    placed = await asyncio.gather(*(place(i) for i in range(20)))
    assert placed.count(a) == 3 and placed.count(b) == 4 and placed.count(None) == 13
    assert await sandboxes.conversation_count(db, a) == 4
    assert await sandboxes.conversation_count(db, b) == 4


async def test_events_are_inserted_once_and_paged(db: Database) -> None:
    rows = [
        {
            "conversation_id": "c1",
            "event_id": f"e{i:03}",
            "kind": "MessageEvent" if i % 2 else "ActionEvent",
            "source": "agent",
            "timestamp": f"2026-01-01T00:00:{i:02}.000000+00:00",
            "body": json.dumps({"id": f"e{i:03}"}),
        }
        for i in range(30)
    ]
    await events.insert_batch(db, rows[:20])
    await events.insert_batch(db, rows[10:])  # a replayed overlap
    await events.insert_batch(db, rows)
    assert await events.count(db, "c1", EventFilters()) == 30
    assert await events.count(db, "c1", EventFilters(kind="ActionEvent")) == 15
    first, following = await events.search(
        db, "c1", EventFilters(), descending=False, limit=12, page=None
    )
    second, _ = await events.search(
        db, "c1", EventFilters(), descending=False, limit=100, page=following
    )
    assert [json.loads(b)["id"] for b in first + second] == [f"e{i:03}" for i in range(30)]
    late = EventFilters(timestamp_gte="2026-01-01T00:00:25.000000+00:00")
    assert await events.count(db, "c1", late) == 5
    newest, _ = await events.search(db, "c1", EventFilters(), descending=True, limit=1, page=None)
    assert json.loads(newest[0])["id"] == "e029"
    assert [b async for b in events.all_bodies(db, "c1", chunk=7)] == [r["body"] for r in rows]
    async with db.connect() as conn:
        assert await conn.scalar(text("SELECT count(*) FROM events")) == 30


async def test_a_reconciler_round_claims_a_bounded_share_oldest_first(db: Database) -> None:
    user = await accounts.get_or_create_user(db, "erin")
    ids = [
        await _sandbox(db, user.id, f"s{i}", SandboxStatus.RUNNING, age=10 - i, idle=0)
        for i in range(5)
    ]
    await _sandbox(db, user.id, "gone", SandboxStatus.MISSING, age=20, idle=0)  # nothing left
    moment = db.now()
    first = await sandboxes.claim_round(db, "plane-a", moment, 10, cleanup_due=moment, limit=2)
    assert [row.id for row in first] == ids[:2]
    # Another process, the same round: only what nobody claimed yet, still at most its limit.
    second = await sandboxes.claim_round(db, "plane-b", moment, 10, cleanup_due=moment, limit=2)
    assert [row.id for row in second] == ids[2:4]
    # The next round takes the one left waiting first, then those claimed longest ago.
    later = moment + timedelta(seconds=10)
    third = await sandboxes.claim_round(db, "plane-a", later, 10, cleanup_due=later, limit=3)
    # (s2 and s3 wait longer than they)
    assert sorted(row.id for row in third) == sorted([ids[4], *ids[:2]])


async def test_a_round_leaves_hibernated_sandboxes_out_until_their_deletion_is_due(
    db: Database,
) -> None:
    """Thousands of hibernated sandboxes (PAUSED, no process) took the rounds' places, each for
    nothing, and running ones were looked at minutes apart (bench/capacity.py)."""
    user = await accounts.get_or_create_user(db, "gil")
    running = await _sandbox(db, user.id, "run", SandboxStatus.RUNNING, age=1, idle=0)
    frozen = await _sandbox(db, user.id, "frozen", SandboxStatus.PAUSED, age=2, idle=0)
    asleep = await _sandbox(db, user.id, "asleep", SandboxStatus.PAUSED, age=3, idle=0)
    paused_at = db.now() - timedelta(hours=2)
    await sandboxes.set_fields(db, frozen, ref="123:456", port=8000, paused_at=paused_at)
    await sandboxes.set_fields(db, asleep, paused_at=paused_at)  # no ref: hibernated
    moment = db.now()
    claimed = await sandboxes.claim_round(db, "plane-a", moment, 10, cleanup_due=moment, limit=10)
    assert sorted(row.id for row in claimed) == sorted([running, frozen])
    later = moment + timedelta(seconds=10)
    not_yet = await sandboxes.claim_round(
        db,
        "plane-a",
        later,
        10,
        cleanup_due=later,
        limit=10,
        paused_before=later - timedelta(days=1),
    )
    assert asleep not in [row.id for row in not_yet]
    due = await sandboxes.claim_round(
        db,
        "plane-a",
        later,
        10,
        cleanup_due=later,
        limit=10,
        paused_before=later - timedelta(hours=1),
    )
    assert asleep in [row.id for row in due]


async def test_a_status_is_written_only_along_the_transition_table(db: Database) -> None:
    """The store's own guard, for what waits for no sandbox guard (a deletion racing a start):
    a move from a status the table does not allow is not written, and a move comes back as
    stored."""
    user = await accounts.get_or_create_user(db, "fay")
    broken = await _sandbox(db, user.id, "broken", SandboxStatus.ERROR, age=1, idle=1)
    assert await sandboxes.set_status(db, broken, SandboxStatus.RUNNING) is None
    assert await sandboxes.set_status(db, broken, SandboxStatus.ERROR, "again") is None
    moved = await sandboxes.set_status(
        db, broken, SandboxStatus.MISSING, "deleted", reason=SandboxReason.USER
    )
    assert moved is not None and (moved.status, moved.status_detail) == (
        SandboxStatus.MISSING,
        "deleted",
    )
    assert moved.status_reason is SandboxReason.USER and moved.cleanup_after is not None
    assert await sandboxes.set_status(db, broken, SandboxStatus.MISSING) is None
    assert await sandboxes.set_status(db, broken, SandboxStatus.STARTING) is None

    paused = await _sandbox(db, user.id, "paused", SandboxStatus.PAUSED, age=60, idle=30)
    before = await sandboxes.get(db, paused)
    assert before is not None
    resumed = await sandboxes.set_status(db, paused, SandboxStatus.RUNNING, touch=True)
    assert resumed is not None and resumed.status is SandboxStatus.RUNNING
    assert resumed.running_since is not None and resumed.paused_at is None
    assert resumed.last_activity_at > before.last_activity_at  # a resume is activity
    assert resumed == await sandboxes.get(db, paused)  # the row as stored, not a guess
    assert await sandboxes.set_status(db, paused, SandboxStatus.STARTING) is None  # never back
    assert await sandboxes.set_status(db, paused, SandboxStatus.RUNNING) is None  # there already


async def test_sqlite_writers_queue_under_a_burst(tmp_path: Path) -> None:
    """100 transactions at once that each read a counter, then write it plus one (as a
    placement reads the free places, then takes one), on a SQLite file whose busy timeout is
    short: every one commits, none is refused as "database is locked", and no update is lost
    (each read saw the write before it)."""
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'burst.db'}", busy_timeout=0.2)
    try:
        await db.migrate()
        user = await accounts.get_or_create_user(db, "burst")
        seq = select(users.c.placement_seq).where(users.c.id == user.id)

        async def take() -> None:
            async with db.begin() as conn:
                current = int(await conn.scalar(seq) or 0)
                await conn.execute(text("SELECT count(*) FROM sandboxes"))  # more turns held
                await conn.execute(
                    update(users).where(users.c.id == user.id).values(placement_seq=current + 1)
                )

        outcomes = await asyncio.gather(*(take() for _ in range(100)), return_exceptions=True)
        assert [o for o in outcomes if o is not None] == []
        async with db.connect() as conn:
            assert await conn.scalar(seq) == 100
    finally:
        await db.close()


async def test_a_cancelled_writer_leaves_the_file_unlocked(tmp_path: Path) -> None:
    """A task cancelled in the middle of a write transaction (a start task at shutdown, a
    request past the server's grace) ends cancelled, and leaves SQLite's write lock free: the
    next writer, in this process or another, goes through at once. Tried at 300 points of the
    transaction: statements, the BEGIN, the commit."""
    path = tmp_path / "cancel.db"
    db = Database(f"sqlite+aiosqlite:///{path}", busy_timeout=1)
    try:
        await db.migrate()
        user = await accounts.get_or_create_user(db, "cancel")
        seq = select(users.c.placement_seq).where(users.c.id == user.id)

        async def take_forever() -> None:
            while True:
                async with db.begin() as conn:
                    current = int(await conn.scalar(seq) or 0)
                    await conn.execute(
                        update(users).where(users.c.id == user.id).values(placement_seq=current + 1)
                    )

        points = random.Random(7)
        for _ in range(300):
            task = asyncio.create_task(take_forever())
            await asyncio.sleep(points.random() * 0.01)
            task.cancel()
            outcome = await asyncio.gather(task, return_exceptions=True)
            assert isinstance(outcome[0], asyncio.CancelledError), outcome
            other = sqlite3.connect(path, timeout=0, isolation_level=None)  # another process's
            try:
                other.execute("BEGIN IMMEDIATE")
                other.execute("ROLLBACK")
            finally:
                other.close()
        async with db.begin() as conn:  # and this process's next writer
            assert int(await conn.scalar(seq) or 0) > 0
    finally:
        await db.close()


async def test_closing_lets_a_transaction_under_way_end_and_begins_none_after(
    tmp_path: Path,
) -> None:
    """A control plane stopping while a request still writes (a lease released in a
    `finally`): the write ends, committed; one asked for after the close is refused at once
    as a storage failure that will not pass; and every connection is closed, none left whose
    thread answers an event loop gone by then (one was: "Event loop is closed" failed a CI
    run)."""
    path = tmp_path / "close.db"
    db = Database(f"sqlite+aiosqlite:///{path}", busy_timeout=1)
    await db.migrate()
    user = await accounts.get_or_create_user(db, "closing")
    inside, go_on = asyncio.Event(), asyncio.Event()

    async def slow_write() -> None:
        async with db.begin() as conn:
            inside.set()
            await go_on.wait()
            await conn.execute(update(users).where(users.c.id == user.id).values(placement_seq=41))

    writing = asyncio.create_task(slow_write())
    await inside.wait()
    closing = asyncio.create_task(db.close())
    await asyncio.sleep(0.05)
    assert not closing.done()  # it waits for the write
    with pytest.raises(DatabaseClosed):
        async with db.connect():
            pass
    assert not transient(DatabaseClosed("the database is closed"))
    go_on.set()
    await writing
    await closing
    stored = sqlite3.connect(path).execute("SELECT placement_seq FROM users").fetchone()
    assert stored == (41,)
    assert all(c._connection is None for c in db._made)  # each closed (or collected)


async def test_the_database_files_are_readable_by_this_user_alone(tmp_path: Path) -> None:
    """Under the usual umask (022), the SQLite file and the -wal and -shm files SQLite makes
    beside it are 0600, in a directory made 0700: no other local user reads any of them."""
    old = os.umask(0o022)
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'state' / 'cp.db'}")
    try:
        await db.migrate()
        await accounts.get_or_create_user(db, "alice")
        modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "state").iterdir()}
        assert modes == {"cp.db": 0o600, "cp.db-wal": 0o600, "cp.db-shm": 0o600}
        assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700
    finally:
        os.umask(old)
        await db.close()


async def test_a_node_fences_round_answers_live_sandboxes_their_policy(
    db: Database, tmp_path: Path
) -> None:
    """A Swarm node's fence reports its sandboxes: a live one is answered its policy and its
    refusals kept, an ended or unknown one null (let out), in one read of the rows."""
    from control_plane.network.policy import OPEN
    from control_plane.sandboxes.fences import NodeFences, reported

    user = await accounts.get_or_create_user(db, "fenced")
    live = await _sandbox(db, user.id, "livebox", SandboxStatus.RUNNING, age=1, idle=1)
    ended = await _sandbox(db, user.id, "endedbox", SandboxStatus.MISSING, age=1, idle=1)
    fences = NodeFences(db, Cipher.for_config(None, tmp_path))
    answer = await fences.report(
        {
            sid: reported(f"10.0.0.{n}", n, [], None)
            for n, sid in enumerate((live, ended, "unknownbox"))
        }
    )
    assert answer == {live: OPEN, ended: None, "unknownbox": None}
    assert fences.refusals(live) is not None and fences.refusals(ended) is None
    assert await sandboxes.get_many(db, []) == {}


async def test_a_start_task_ends_once_and_is_ready_only_after_its_conversation(
    db: Database,
) -> None:
    """The stages' own guard in the store (`models.START_STAGES`): READY comes only once the
    conversation was created, and a finished task is never written again (a start ends READY
    or ERROR exactly once); a task taken up again waits for its sandbox again."""
    user = await accounts.get_or_create_user(db, "gil")
    async with db.begin() as conn:
        task = await tasks.insert(db, "t1", user.id, "request", conn)
    with pytest.raises(
        InvalidTransition,
        match=r"is WORKING: it cannot go to READY \(from "
        r"WORKING it may go to: WORKING, WAITING_FOR_SANDBOX, ERROR\)",
    ):
        await tasks.set_status(db, task.id, StartTaskStatus.READY)
    for stage in (
        StartTaskStatus.WAITING_FOR_SANDBOX,
        StartTaskStatus.STARTING_CONVERSATION,
        StartTaskStatus.WAITING_FOR_SANDBOX,
        StartTaskStatus.STARTING_CONVERSATION,
        StartTaskStatus.READY,
    ):
        await tasks.set_status(db, task.id, stage)
    for stage in StartTaskStatus:
        with pytest.raises(InvalidTransition, match="may go to: none"):
            await tasks.set_status(db, task.id, stage, "again")
    stored = (await tasks.get_many(db, [task.id], user.id))[task.id]
    assert (stored.status, stored.detail) == (StartTaskStatus.READY, None)
