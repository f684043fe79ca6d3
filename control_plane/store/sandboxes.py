"""Sandbox rows: status, the provider's handle (its ref, port and host), activity."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, case, func, not_, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from control_plane.models import SandboxReason, SandboxRow, SandboxStatus, entered_from
from control_plane.sandboxes import names
from control_plane.store.db import Database
from control_plane.store.tables import app_conversations, sandboxes


def _row(row: Any) -> SandboxRow:
    data = dict(row._mapping)
    data["status"] = SandboxStatus(data["status"])
    for name in ("status_reason", "pausing_reason"):
        reason = data.get(name)
        data[name] = SandboxReason(reason) if reason else None
    return SandboxRow(**data)


async def insert(conn: AsyncConnection, moment: datetime, **values: Any) -> SandboxRow:
    """A sandbox made at `moment` (STARTING unless `values` say otherwise), with a readable
    name of its own among its user's sandboxes unless `values` give one (the caller holds the
    user's lock, as a start does; the unique index refuses a name taken meanwhile)."""
    if "name" not in values:
        values["name"] = names.generate(await names_of(conn, values["user_id"]))
    values = {
        "status": SandboxStatus.STARTING.value,
        "created_at": moment,
        "updated_at": moment,
        "last_activity_at": moment,
        **values,
    }
    made = await conn.execute(sandboxes.insert().values(**values).returning(sandboxes))
    return _row(made.one())


async def get(db: Database, sandbox_id: str, user_id: str | None = None) -> SandboxRow | None:
    query = select(sandboxes).where(sandboxes.c.id == sandbox_id)
    if user_id is not None:
        query = query.where(sandboxes.c.user_id == user_id)
    async with db.connect() as conn:
        row = (await conn.execute(query)).first()
    return None if row is None else _row(row)


async def get_many(db: Database, sandbox_ids: list[str]) -> dict[str, SandboxRow]:
    """The rows of `sandbox_ids` that exist, in one query (a node fence's round names up to
    a thousand)."""
    if not sandbox_ids:
        return {}
    async with db.connect() as conn:
        found = await conn.execute(select(sandboxes).where(sandboxes.c.id.in_(sandbox_ids)))
        return {row.id: row for row in map(_row, found)}


async def by_key_hash(db: Database, key_hash: str) -> SandboxRow | None:
    async with db.connect() as conn:
        row = (
            await conn.execute(select(sandboxes).where(sandboxes.c.session_key_hash == key_hash))
        ).first()
    return None if row is None else _row(row)


async def search(
    db: Database, user_id: str, *, status: SandboxStatus | None, limit: int, offset: int
) -> list[SandboxRow]:
    """Newest first."""
    query = select(sandboxes).where(sandboxes.c.user_id == user_id)
    if status is not None:
        query = query.where(sandboxes.c.status == status.value)
    query = (
        query.order_by(sandboxes.c.created_at.desc(), sandboxes.c.id.desc())
        .limit(limit)
        .offset(offset)
    )
    async with db.connect(aside=True) as conn:
        return [_row(r) for r in await conn.execute(query)]


async def live(db: Database) -> list[SandboxRow]:
    """Every sandbox a provider may still have running (not ERROR or MISSING)."""
    query = select(sandboxes).where(
        sandboxes.c.status.in_(
            [SandboxStatus.STARTING.value, SandboxStatus.RUNNING.value, SandboxStatus.PAUSED.value]
        )
    )
    async with db.connect(aside=True) as conn:
        return [_row(r) for r in await conn.execute(query)]


async def set_fields(db: Database, sandbox_id: str, **values: Any) -> None:
    """Anything but the status, which moves by `set_status` only."""
    assert "status" not in values
    async with db.begin() as conn:
        await conn.execute(
            update(sandboxes)
            .where(sandboxes.c.id == sandbox_id)
            .values(updated_at=db.now(), **values)
        )


async def set_status(
    db: Database,
    sandbox_id: str,
    status: SandboxStatus,
    detail: str | None = None,
    *,
    reason: SandboxReason | None = None,
    touch: bool = False,
    fields: Mapping[str, Any] | None = None,
) -> SandboxRow | None:
    """Move to `status` for `reason`, only from a status the transition table allows
    (`models.SANDBOX_TRANSITIONS`: ERROR and MISSING are never left, but for a deletion); the row as
    moved, None when it was not. A health check's failure (`unhealthy_since`) and a pause under
    way end with any change; a terminal status leaves remains to clean up (`cleanup_after`).
    `touch`: the move is activity too (`touch`); `fields` (not the status) are stored with the
    move, and only with it."""
    assert fields is None or "status" not in fields
    query = update(sandboxes).where(
        sandboxes.c.id == sandbox_id,
        sandboxes.c.status.in_([s.value for s in entered_from(status)]),
    )
    moment = db.now()
    values: dict[str, Any] = {
        "status": status.value,
        "status_detail": detail,
        "updated_at": moment,
        "unhealthy_since": None,
        "pausing_reason": None,
        "pausing_detail": None,
    }
    values["status_reason"] = None if reason is None else reason.value
    if status.terminal:
        values["cleanup_after"] = moment
    # The timers start when the status is entered (a move is never to the same status).
    if status is SandboxStatus.RUNNING:
        values["running_since"] = moment
        values["paused_at"] = None
    elif status is SandboxStatus.PAUSED:
        values["paused_at"] = moment
    values.update(fields or {})
    if touch:
        values["last_activity_at"] = case(
            (sandboxes.c.last_activity_at < moment, moment), else_=sandboxes.c.last_activity_at
        )
    async with db.begin() as conn:
        moved = (await conn.execute(query.values(**values).returning(sandboxes))).first()
    return None if moved is None else _row(moved)


async def retire_in(
    conn: AsyncConnection, sandbox_id: str, reason: SandboxReason, detail: str, moment: datetime
) -> bool:
    """MISSING (its remains to clean up) inside the caller's transaction, only when no
    conversation is in it any more: the caller holds the user's lock, so no placement can take
    it meanwhile. True when it was retired."""
    taken = select(app_conversations.c.id).where(app_conversations.c.sandbox_id == sandbox_id)
    done = await conn.execute(
        update(sandboxes)
        .where(
            sandboxes.c.id == sandbox_id,
            ~taken.exists(),
            sandboxes.c.status.in_([s.value for s in entered_from(SandboxStatus.MISSING)]),
        )
        .values(
            status=SandboxStatus.MISSING.value,
            status_reason=reason.value,
            status_detail=detail,
            updated_at=moment,
            unhealthy_since=None,
            pausing_reason=None,
            pausing_detail=None,
            cleanup_after=moment,
        )
    )
    return bool(done.rowcount)


async def touch(
    conn: AsyncConnection, sandbox_id: str, moment: datetime, *, only_running: bool = False
) -> None:
    """Activity (user or agent): what the idle time counts from and 'least recently used'
    orders by; never moved back."""
    query = update(sandboxes).where(
        sandboxes.c.id == sandbox_id, sandboxes.c.last_activity_at < moment
    )
    if only_running:
        query = query.where(sandboxes.c.status == SandboxStatus.RUNNING.value)
    await conn.execute(query.values(last_activity_at=moment))


async def conversation_count(db: Database, sandbox_id: str) -> int:
    async with db.connect() as conn:
        value = await conn.scalar(
            select(func.count())
            .select_from(app_conversations)
            .where(app_conversations.c.sandbox_id == sandbox_id)
        )
    return int(value or 0)


async def conversation_counts(db: Database, sandbox_ids: list[str]) -> dict[str, int]:
    """Conversations per sandbox, for a page of sandboxes at once (absent ones: 0)."""
    if not sandbox_ids:
        return {}
    query = (
        select(app_conversations.c.sandbox_id, func.count())
        .where(app_conversations.c.sandbox_id.in_(sandbox_ids))
        .group_by(app_conversations.c.sandbox_id)
    )
    async with db.connect() as conn:
        found = {str(r[0]): int(r[1]) for r in await conn.execute(query)}
    return {i: found.get(i, 0) for i in sandbox_ids}


async def get_in(conn: AsyncConnection, sandbox_id: str) -> SandboxRow | None:
    """Read inside the caller's transaction (placement)."""
    row = (await conn.execute(select(sandboxes).where(sandboxes.c.id == sandbox_id))).first()
    return None if row is None else _row(row)


#: The statuses of a sandbox that holds (or may hold) a process.
LIVE = (SandboxStatus.STARTING, SandboxStatus.RUNNING, SandboxStatus.PAUSED)
#: The advisory lock key that serializes the count of live sandboxes on PostgreSQL.
LIVE_LOCK = 0x6C697665


async def live_count(conn: AsyncConnection, user_id: str) -> int:
    """The user's sandboxes that hold (or may hold) a process."""
    value = await conn.scalar(
        select(func.count())
        .select_from(sandboxes)
        .where(sandboxes.c.user_id == user_id, sandboxes.c.status.in_([s.value for s in LIVE]))
    )
    return int(value or 0)


async def conversations_in(
    conn: AsyncConnection, sandbox_id: str, *, recorded_only: bool = False
) -> int:
    """The sandbox's conversations; `recorded_only`: those no start task made (the webhook
    recorded them)."""
    where = [app_conversations.c.sandbox_id == sandbox_id]
    if recorded_only:
        where.append(app_conversations.c.start_task_id.is_(None))
    value = await conn.scalar(select(func.count()).select_from(app_conversations).where(*where))
    return int(value or 0)


async def over_cap(conn: AsyncConnection, user_id: str, per_user: int, in_all: int) -> str | None:
    """Why one more live sandbox is refused (None: it is not). Counted over all users too, so
    on PostgreSQL the count is taken under a lock of its own (the user's lock, which the caller
    holds, keeps other users' starts out of nothing)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LIVE_LOCK})
    if await live_count(conn, user_id) >= per_user:
        return f"at most {per_user} live sandboxes per user: delete or let some be cleaned up first"
    value = await conn.scalar(
        select(func.count())
        .select_from(sandboxes)
        .where(sandboxes.c.status.in_([s.value for s in LIVE]))
    )
    if int(value or 0) >= in_all:
        return (
            f"this control plane runs its most live sandboxes ({in_all}, over all users): "
            "try again once some are deleted or cleaned up"
        )
    return None


async def names_of(conn: AsyncConnection, user_id: str) -> set[str]:
    """The names of the user's sandboxes (MISSING ones' too: their rows stay, and so do the
    names their conversations were read under)."""
    found = await conn.scalars(select(sandboxes.c.name).where(sandboxes.c.user_id == user_id))
    return set(found)


async def rename(db: Database, row: SandboxRow, name: str) -> bool:
    """Give the sandbox `name`; False (nothing changed) when another of its user's sandboxes
    has it, compared without case (the unique index holds two renames at once apart)."""
    async with db.begin() as conn:
        clash = await conn.scalar(
            select(sandboxes.c.id).where(
                sandboxes.c.user_id == row.user_id,
                sandboxes.c.id != row.id,
                func.lower(sandboxes.c.name) == name.lower(),
            )
        )
        if clash is not None:
            return False
        await conn.execute(
            update(sandboxes).where(sandboxes.c.id == row.id).values(name=name, updated_at=db.now())
        )
    return True


async def another_user_has_one(conn: AsyncConnection, user_id: str) -> bool:
    """Whether a user other than `user_id` has (or had: rows stay) a sandbox here."""
    found = await conn.scalar(select(sandboxes.c.id).where(sandboxes.c.user_id != user_id).limit(1))
    return found is not None


async def claim_round(
    db: Database,
    holder: str,
    moment: datetime,
    interval: float,
    *,
    cleanup_due: datetime,
    limit: int,
    paused_before: datetime | None = None,
) -> list[SandboxRow]:
    """The sandboxes due for a reconciler round (live ones, and terminal ones whose clean-up is
    due at `cleanup_due`, lifecycle time), claimed by `holder` until `interval` seconds from
    `moment` (wall-clock time): two control planes never look at one sandbox in the same round
    (the second's UPDATE finds the rows no longer due). At most `limit`, those waiting longest
    first: the rest stay due and are claimed by the next round (of this process or another).

    A hibernated sandbox (PAUSED, no process: no `ref`) has nothing to look at: it is due only
    once it was paused before `paused_before` (lifecycle time; its deletion time has come),
    never without it. Thousands of them would otherwise take the rounds' places, each a lease
    taken and given back for nothing, and the live ones would be looked at minutes apart.

    The rows as claimed: a round's looks start from them rather than from a read each (what
    a look acts on, it reads again under the sandbox's guard)."""
    following = moment + timedelta(seconds=interval)
    live = [SandboxStatus.STARTING.value, SandboxStatus.RUNNING.value, SandboxStatus.PAUSED.value]
    asleep = and_(sandboxes.c.status == SandboxStatus.PAUSED.value, sandboxes.c.ref.is_(None))
    wanted = or_(
        and_(sandboxes.c.status.in_(live), not_(asleep)),
        and_(sandboxes.c.cleanup_after.is_not(None), sandboxes.c.cleanup_after <= cleanup_due),
        *([and_(asleep, sandboxes.c.paused_at <= paused_before)] if paused_before else []),
    )
    due = or_(sandboxes.c.reconcile_after.is_(None), sandboxes.c.reconcile_after <= moment)
    first = (
        select(sandboxes.c.id)
        .where(wanted, due)
        .order_by(
            sandboxes.c.reconcile_after.is_not(None),
            sandboxes.c.reconcile_after,
            sandboxes.c.created_at,
        )
        .limit(limit)
    )
    async with db.begin(aside=True) as conn:
        # `wanted` and `due` again on the rows themselves: a row another process claimed
        # meanwhile is not due any more when PostgreSQL re-reads it after the other's commit.
        await conn.execute(
            update(sandboxes)
            .where(sandboxes.c.id.in_(first.scalar_subquery()), wanted, due)
            .values(reconcile_after=following, reconciled_by=holder)
        )
        found = await conn.execute(
            select(sandboxes)
            .where(
                sandboxes.c.reconciled_by == holder,
                sandboxes.c.reconcile_after == following,
                wanted,
            )
            .order_by(sandboxes.c.created_at)
        )
        return [_row(row) for row in found]


async def by_status(db: Database) -> dict[tuple[str, str], int]:
    """Every sandbox counted by (status, host): what the metrics' scrape shows."""
    query = select(sandboxes.c.status, sandboxes.c.host, func.count()).group_by(
        sandboxes.c.status, sandboxes.c.host
    )
    async with db.connect(aside=True) as conn:
        return {(s, h or ""): n for s, h, n in await conn.execute(query)}
