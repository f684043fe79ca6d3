"""Leases: how several control-plane processes on one database share the work.

Each process has a holder id. Work that must be done by exactly one process (a start task, a
transition or health check of a sandbox) is done under a lease row (`store.leases`) that the
holder renews in the background every third of the lease's length; a holder that dies (SIGKILL,
a lost host) stops renewing, and its leases are taken over once they expire. Writes that end a
piece of work are guarded by the lease (`store.leases.held`), so a holder that stalled past its
lease finds its work taken over and changes nothing.

On SQLite there is one process by definition: its holder id is fixed, so a restarted control
plane takes its own leases back at once instead of waiting for them to expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator

from sqlalchemy.ext.asyncio import AsyncConnection

from control_plane.store import Database
from control_plane.store import leases as rows
from web.errors import Unavailable

logger = logging.getLogger(__name__)

TASK = "start-task"
SANDBOX = "sandbox"


class Leases:
    def __init__(self, db: Database, ttl: float) -> None:
        self.db = db
        self.ttl = ttl
        self.holder = (
            "local"
            if db.dialect == "sqlite"
            else f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        )
        self._task: asyncio.Task[None] | None = None

    async def claim(self, kind: str, key: str) -> bool:
        return await rows.claim(self.db, kind, key, self.holder, self.ttl)

    async def claim_in(self, conn: AsyncConnection, kind: str, key: str) -> bool:
        """`claim` in the caller's transaction: the lease of a row made in it comes with it
        (one write fewer, and no moment when the row is there unleased)."""
        return await rows.claim_in(conn, self.db, kind, key, self.holder, self.ttl)

    async def release(self, kind: str, key: str) -> None:
        await rows.release(self.db, kind, key, self.holder)

    async def acquire(self, kind: str, key: str, timeout: float) -> None:
        """Wait for the lease (another process acts on the same thing): 503 after `timeout`."""
        deadline = asyncio.get_running_loop().time() + timeout
        pause = 0.02
        while not await self.claim(kind, key):
            if asyncio.get_running_loop().time() > deadline:
                raise Unavailable(
                    f"{kind} {key} is busy (another control plane acts on it); try again"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    @contextlib.asynccontextmanager
    async def holding(self, kind: str, key: str, timeout: float) -> AsyncIterator[None]:
        await self.acquire(kind, key, timeout)
        try:
            yield
        finally:
            await self.release(kind, key)

    def start(self) -> None:
        self._task = asyncio.create_task(self._renew_loop(), name="lease renewal")

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                await rows.renew(self.db, self.holder, self.ttl)
            except Exception:  # the database away for a moment: the next round tries again
                logger.exception("renewing the leases of %s failed", self.holder)

    async def close(self) -> None:
        """Stop renewing (a clean stop releases its leases as its work ends)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
