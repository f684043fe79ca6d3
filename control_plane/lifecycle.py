"""Lifecycle timers of SPEC 3.1 and 8, deployment-wide:

- Idle time: a RUNNING sandbox without agent or user activity for `idle_seconds` is paused
  (activity: webhook batches, messages, resumes).
- The 12-hour cap: a sandbox RUNNING for 12 hours is paused even if active; resuming opens a
  new window. Not configurable (SPEC 8); the clock is a seam so tests need not wait.
- Deletion time: a sandbox PAUSED for `deletion_seconds` is destroyed and its conversations,
  with their events, are permanently deleted.

Time comes from the clock of `models.now` (a `core.retry.Clock`), the same one stored times
are taken from, so schedules are proven by moving the clock.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from control_plane.app_conversations import AppConversationService
from control_plane.errors import ApiError
from control_plane.models import SandboxStatus, now
from control_plane.sandboxes.service import SandboxService
from control_plane.store import Database
from control_plane.store import conversations, events
from control_plane.store import sandboxes as rows
from control_plane.store.sandboxes import SandboxRow

logger = logging.getLogger(__name__)

MAX_SESSION_SECONDS = 12 * 3600


class Lifecycle:
    def __init__(self, db: Database, sandboxes: SandboxService, records: AppConversationService, *,
                 idle_seconds: float | None, deletion_seconds: float | None, interval: float,
                 max_session_seconds: float = MAX_SESSION_SECONDS) -> None:
        self.db = db
        self.sandboxes = sandboxes
        self.records = records
        self.idle = None if idle_seconds is None else timedelta(seconds=idle_seconds)
        self.deletion = None if deletion_seconds is None else timedelta(seconds=deletion_seconds)
        self.session = timedelta(seconds=max_session_seconds)
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    def deadlines(self, row: SandboxRow) -> tuple[datetime | None, datetime | None]:
        """When the timers will act on this sandbox as things stand: (pause, deletion).
        Activity moves the pause later; the 12-hour cap does not move."""
        if row.status is SandboxStatus.RUNNING:
            moments = [row.last_activity_at + self.idle] if self.idle is not None else []
            if row.running_since is not None:
                moments.append(row.running_since + self.session)
            return (min(moments) if moments else None), None
        if row.status is SandboxStatus.PAUSED and self.deletion is not None \
                and row.paused_at is not None:
            return None, row.paused_at + self.deletion
        return None, None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="lifecycle timers")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.tick()
            except Exception:  # one bad round (the database away) must not end the timers
                logger.exception("lifecycle round failed")

    async def tick(self) -> None:
        """One round over the live sandboxes."""
        moment = now()
        for row in await rows.live(self.db):
            try:
                await self._check(row, moment)
            except ApiError as exc:  # it changed meanwhile (deleted, died): next round sees it
                logger.info("lifecycle of sandbox %s: %s", row.id, exc.detail)

    async def _check(self, row: SandboxRow, moment: datetime) -> None:
        if row.status is SandboxStatus.RUNNING:
            if self.idle is not None and row.last_activity_at <= moment - self.idle:
                await self.sandboxes.pause(row, f"idle for {self.idle.total_seconds():g} s")
            elif row.running_since is not None and row.running_since <= moment - self.session:
                await self.sandboxes.pause(row, "the 12-hour session cap: resume for a new window")
        elif row.status is SandboxStatus.PAUSED and self.deletion is not None \
                and row.paused_at is not None and row.paused_at <= moment - self.deletion:
            await self.delete_forever(row)

    async def delete_forever(self, row: SandboxRow) -> None:
        """The sandbox and its conversations, with their events; they cannot be resumed."""
        logger.info("deleting sandbox %s: paused beyond the deletion time", row.id)
        # Conversations first: cut short here, the next round finds a paused sandbox without
        # conversations and finishes the job.
        for conversation_id in await conversations.in_sandbox(self.db, row.id):
            async with self.db.begin() as conn:
                await conversations.remove(conn, conversation_id)
            await events.remove(self.db, conversation_id)
        await self.sandboxes.destroy(row)
        await rows.set_status(self.db, row.id, SandboxStatus.MISSING,
                              "deleted: paused beyond the deletion time", unless_terminal=False)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
