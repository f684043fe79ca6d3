"""The reconciler: one loop that brings every sandbox's timers and drift to account (SPEC 3.1, 8).

Each round, the live sandboxes due for a look (at most `ROUND_LIMIT`, those waiting longest
first) are claimed in the database (`claim_round`), so
with several control planes on one database each sandbox is looked at by one of them per round,
not by every process. For each:

- Idle time: a RUNNING sandbox without agent or user activity for `idle_seconds` is paused
  (activity: webhook batches, messages, controls, workspace and event reads, resumes).
- The 12-hour cap: a sandbox RUNNING for 12 hours is paused even if active, its runs paused by
  the agent server first; resuming opens a new window and continues them. Not configurable
  (SPEC 8); the clock is a seam so tests need not wait.
- Deletion time: a sandbox PAUSED for `deletion_seconds` is destroyed and its conversations,
  with their events, are permanently deleted (they cannot be resumed).
- Drift: otherwise the sandbox is checked against its provider (`sandboxes.drift`:
  vanished -> MISSING, failing its health check past the grace -> ERROR, a start whose launcher
  died taken over, a pause whose control plane died half-way finished).
- Remains: an ERROR or MISSING sandbox whose clean-up failed (`cleanup_after`) is cleaned up
  again once that is due.

Then start tasks whose control plane died are taken over. Each decision is taken again on the
current row under the sandbox's guard (`when=`), so a timer acts once even when a user acts on
the sandbox at the same moment. Timer time comes from the database's clock (`Database.now`, a
`core.retry.Clock` given to it), the same one stored times are taken from, so schedules are
proven by moving the clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from control_plane.audit import SYSTEM, AuditLog
from control_plane.leases import Leases
from control_plane.models import SandboxReason, SandboxRow, SandboxStatus
from control_plane.sandboxes.drift import Drift
from control_plane.sandboxes.service import SandboxService
from control_plane.start_tasks import StartTaskService
from control_plane.store import Database
from control_plane.store import leases as lease_rows
from control_plane.store import sandboxes as rows
from web.errors import ServiceError

logger = logging.getLogger(__name__)

MAX_SESSION_SECONDS = 12 * 3600
#: Sandboxes acted on at once in a round (a pause may wait for runs to reach a step's end).
CONCURRENCY = 8
#: Sandboxes claimed in one round at most: a round's work (and its task list) stays bounded
#: however many sandboxes there are; the rest are claimed by the next rounds, oldest first.
ROUND_LIMIT = 200


def duration(seconds: float) -> str:
    """Seconds as a person says them: "45 s", "30 min", "1 h 30 min", "2 days"."""
    whole = round(seconds)
    if whole < 60 or whole % 60:
        return f"{seconds:g} s"
    minutes = whole // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours % 24 == 0 and not minutes:
        days = hours // 24
        return f"{days} day" if days == 1 else f"{days} days"
    return f"{hours} h" + (f" {minutes} min" if minutes else "")


class Lifecycle:
    def __init__(
        self,
        db: Database,
        sandboxes: SandboxService,
        drift: Drift,
        tasks: StartTaskService,
        leases: Leases,
        *,
        idle_seconds: float | None,
        deletion_seconds: float | None,
        interval: float,
        max_session_seconds: float = MAX_SESSION_SECONDS,
        round_limit: int = ROUND_LIMIT,
        audit: AuditLog | None = None,
    ) -> None:
        self.db = db
        #: Where the timers' acts are recorded (actor `system`, from this process).
        self.audit = audit or AuditLog(db)
        self.sandboxes = sandboxes
        self.drift = drift
        self.tasks = tasks
        self.leases = leases
        self.idle = None if idle_seconds is None else timedelta(seconds=idle_seconds)
        self.deletion = None if deletion_seconds is None else timedelta(seconds=deletion_seconds)
        self.session = timedelta(seconds=max_session_seconds)
        self.interval = interval
        self.round_limit = round_limit
        self._task: asyncio.Task[None] | None = None

    def deadlines(self, row: SandboxRow) -> tuple[datetime | None, datetime | None]:
        """When the timers will act on this sandbox as things stand: (pause, deletion).
        Activity moves the pause later; the 12-hour cap does not move."""
        if row.status is SandboxStatus.RUNNING:
            moments = [row.last_activity_at + self.idle] if self.idle is not None else []
            if row.running_since is not None:
                moments.append(row.running_since + self.session)
            return (min(moments) if moments else None), None
        if (
            row.status is SandboxStatus.PAUSED
            and self.deletion is not None
            and row.paused_at is not None
        ):
            return None, row.paused_at + self.deletion
        return None, None

    # The timers, as conditions on the current row (taken again under the sandbox's guard).

    def idle_due(self, row: SandboxRow) -> bool:
        return (
            row.status is SandboxStatus.RUNNING
            and self.idle is not None
            and row.last_activity_at + self.idle <= self.db.now()
        )

    def cap_due(self, row: SandboxRow) -> bool:
        return (
            row.status is SandboxStatus.RUNNING
            and row.running_since is not None
            and row.running_since + self.session <= self.db.now()
        )

    def deletion_due(self, row: SandboxRow) -> bool:
        return (
            row.status is SandboxStatus.PAUSED
            and self.deletion is not None
            and row.paused_at is not None
            and row.paused_at + self.deletion <= self.db.now()
        )

    async def adopt(self) -> None:
        """After a (re)start, before the first round: one look at every live sandbox."""
        await self.drift.adopt(CONCURRENCY)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="reconciler")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.tick()
            except Exception:  # one bad round (the database away) must not end the loop
                logger.exception("reconciler round failed")

    async def tick(self) -> None:
        """One round: the sandboxes this process claimed, then orphaned start tasks."""
        claimed = await rows.claim_round(
            self.db,
            self.leases.holder,
            lease_rows.wall(),
            self.interval,
            cleanup_due=self.db.now(),
            limit=self.round_limit,
            paused_before=None if self.deletion is None else self.db.now() - self.deletion,
        )
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(row: SandboxRow) -> None:
            async with gate:
                try:
                    await self.check(row)
                except ServiceError as exc:  # it changed meanwhile (deleted, busy): next round
                    logger.info("reconciling sandbox %s: %s", row.id, exc.detail)
                except Exception:
                    logger.exception("reconciling sandbox %s failed", row.id)

        await asyncio.gather(*(one(row) for row in claimed))
        await self.tasks.take_over()

    async def check(self, row: SandboxRow) -> None:
        """One claimed sandbox, as the round's claim read it: each act below reads it again
        under its guard, so a row changed since is acted on as it is now."""
        if row.status.terminal:  # what is left of it, when an earlier clean-up failed
            await self.sandboxes.clean_up(row.id, wait=False)
            return
        if self.idle_due(row):
            assert self.idle is not None
            due = Due(self.idle_due)
            paused = await self.sandboxes.pause(
                row,
                SandboxReason.IDLE,
                f"idle for {duration(self.idle.total_seconds())}",
                when=due,
            )
            if due.met and paused.status is SandboxStatus.PAUSED:
                await self._record("sandbox.pause", row, SandboxReason.IDLE)
        elif self.cap_due(row):
            due = Due(self.cap_due)
            paused = await self.sandboxes.pause(
                row,
                SandboxReason.SESSION_CAP,
                "the 12-hour session cap: runs were paused; resume for a new 12-hour window",
                when=due,
            )
            if due.met and paused.status is SandboxStatus.PAUSED:
                await self._record("sandbox.pause", row, SandboxReason.SESSION_CAP)
        elif self.deletion_due(row):
            logger.info("deleting sandbox %s: paused beyond the deletion time", row.id)
            if await self.sandboxes.expire(
                row, "deleted: paused beyond the deletion time", when=self.deletion_due
            ):
                await self._record("sandbox.delete", row, SandboxReason.DELETION_TIME)
        else:
            await self.drift.reconcile(row.id, row=row)

    async def _record(self, action: str, row: SandboxRow, reason: SandboxReason) -> None:
        """A timer's act in the audit log: by `system`, from this control-plane process."""
        await self.audit.record(
            actor=SYSTEM,
            action=action,
            target_kind="sandbox",
            target_id=row.id,
            user_id=row.user_id,
            source=self.leases.holder,
            details={"reason": reason.value},
        )

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


class Due:
    """A timer's condition, remembering whether it held when the act was decided (under the
    sandbox's guard): only then did this round act, and only then is the act recorded."""

    def __init__(self, condition: Callable[[SandboxRow], bool]) -> None:
        self.condition = condition
        self.met = False

    def __call__(self, row: SandboxRow) -> bool:
        self.met = self.condition(row)
        return self.met
