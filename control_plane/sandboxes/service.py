"""SandboxService: keeps the stored sandbox rows and the provider's sandboxes in step.

Rows are the truth for users (status, ownership, activity); the provider is the truth for
processes. Each transition is: act on the provider, then store the outcome. At start-up every
live row is checked against the provider: sandboxes still there are adopted, vanished ones are
MISSING. A health loop then notices sandboxes that die.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncConnection

from control_plane.crypto import Cipher, hash_key, new_key
from control_plane.errors import Conflict, Gone, LimitReached, Unavailable
from control_plane.models import SandboxStatus, now
from control_plane.sandboxes.provider import Handle, Launch, Liveness, ProviderError, SandboxProvider
from control_plane.store import Database
from control_plane.store import sandboxes as rows
from control_plane.store.sandboxes import SandboxRow

logger = logging.getLogger(__name__)

#: Health checks in a row a RUNNING sandbox may miss before it is in ERROR.
UNRESPONSIVE_LIMIT = 3


def handle_of(row: SandboxRow) -> Handle | None:
    if row.pid is None or row.pid_start_time is None or row.port is None:
        return None
    return Handle(sandbox_id=row.id, pid=row.pid, pid_start_time=row.pid_start_time,
                  port=row.port)


class SandboxService:
    def __init__(self, db: Database, provider: SandboxProvider, cipher: Cipher, *,
                 sandboxes_dir: Path, webhook_url: str, health_interval: float = 5.0,
                 max_per_user: int = 50) -> None:
        self.db = db
        self.provider = provider
        self.cipher = cipher
        self.sandboxes_dir = sandboxes_dir
        self.webhook_url = webhook_url
        self.health_interval = health_interval
        self.max_per_user = max_per_user
        #: Health checks in a row a sandbox did not answer (ERROR after UNRESPONSIVE_LIMIT).
        self._silent: dict[str, int] = {}
        self._starts: dict[str, asyncio.Task[None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._health: asyncio.Task[None] | None = None

    # -- rows --------------------------------------------------------------------------------

    async def new_row(self, conn: AsyncConnection, user_id: str, spec_id: str) -> SandboxRow:
        """A STARTING row inside the caller's transaction; `launch()` starts it after commit.

        The caller holds the user's lock (`accounts.lock_user`), so the count below holds."""
        if spec_id not in {spec.id for spec in self.provider.specs()}:
            raise Conflict(f"unknown sandbox spec {spec_id!r}")
        if await rows.live_count(conn, user_id) >= self.max_per_user:
            raise LimitReached(f"at most {self.max_per_user} live sandboxes per user: delete or "
                               "let some be cleaned up first")
        sandbox_id = uuid.uuid4().hex
        key = new_key("sk-sandbox")
        return await rows.insert(conn, id=sandbox_id, user_id=user_id, spec_id=spec_id,
                                 session_key_hash=hash_key(key),
                                 session_key_enc=self.cipher.encrypt(key),
                                 root_dir=str(self.provider.root_dir(sandbox_id, self.sandboxes_dir)))

    def session_key(self, row: SandboxRow) -> str:
        return self.cipher.decrypt(row.session_key_enc)

    def url(self, row: SandboxRow) -> str | None:
        handle = handle_of(row)
        return None if handle is None else self.provider.url(handle)

    def _launch(self, row: SandboxRow) -> Launch:
        return Launch(sandbox_id=row.id, spec_id=row.spec_id, root_dir=Path(row.root_dir),
                      session_api_key=self.session_key(row), webhook_url=self.webhook_url)

    def _lock(self, sandbox_id: str) -> asyncio.Lock:
        return self._locks.setdefault(sandbox_id, asyncio.Lock())

    # -- transitions -----------------------------------------------------------------------

    def launch(self, row: SandboxRow) -> None:
        """Start a STARTING sandbox in the background (POST /sandboxes answers at once)."""
        if row.id not in self._starts:
            task = asyncio.create_task(self._start(row), name=f"start sandbox {row.id}")
            self._starts[row.id] = task
            task.add_done_callback(lambda _: self._starts.pop(row.id, None))

    async def _start(self, row: SandboxRow) -> None:
        try:
            handle = await self.provider.create(self._launch(row))
        except ProviderError as exc:
            await rows.set_status(self.db, row.id, SandboxStatus.ERROR, str(exc))
            return
        except Exception as exc:  # never leave a row STARTING for ever
            logger.exception("starting sandbox %s failed", row.id)
            await rows.set_status(self.db, row.id, SandboxStatus.ERROR, f"start failed: {exc}")
            return
        await rows.set_fields(self.db, row.id, pid=handle.pid, pid_start_time=handle.pid_start_time,
                              port=handle.port)
        if not await rows.set_status(self.db, row.id, SandboxStatus.RUNNING):
            # Deleted while it booted: the row is MISSING already, so the process goes too.
            await self.provider.destroy(row.id, handle, Path(row.root_dir))

    async def wait_running(self, sandbox_id: str, timeout: float = 120.0) -> SandboxRow:
        """Until RUNNING (started or resumed as needed); Conflict or Gone when it cannot be."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            row = await rows.get(self.db, sandbox_id)
            if row is None or row.status is SandboxStatus.MISSING:
                raise Gone(f"sandbox {sandbox_id} is MISSING: it was deleted or cleaned up")
            if row.status is SandboxStatus.ERROR:
                raise Conflict(f"sandbox {sandbox_id} is in ERROR: {row.status_detail or 'failed'}")
            if row.status is SandboxStatus.RUNNING:
                return row
            if row.status is SandboxStatus.PAUSED:
                return await self.resume(row)
            if row.id not in self._starts and handle_of(row) is None:
                self.launch(row)
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise Unavailable(f"sandbox {sandbox_id} is still STARTING")
            start = self._starts.get(row.id)
            if start is not None:  # started here: wake when it ends, not by polling
                await asyncio.wait([start], timeout=remaining)
            else:
                await asyncio.sleep(0.05)

    async def pause(self, row: SandboxRow, reason: str | None = None) -> SandboxRow:
        """SIGSTOP-like: capacity released, state kept; `reason` is shown as status_detail."""
        async with self._lock(row.id):
            row = await self._current(row.id)
            if row.status is SandboxStatus.PAUSED:
                return row
            if row.status is not SandboxStatus.RUNNING:
                raise Conflict(f"sandbox {row.id} is {row.status.value}: only RUNNING can pause")
            handle = handle_of(row)
            assert handle is not None
            try:
                await self.provider.pause(handle)
            except ProviderError as exc:
                await rows.set_status(self.db, row.id, SandboxStatus.ERROR, str(exc))
                raise Conflict(f"sandbox {row.id} cannot be paused: {exc}") from None
            await rows.set_status(self.db, row.id, SandboxStatus.PAUSED, reason)
            return await self._current(row.id)

    async def resume(self, row: SandboxRow) -> SandboxRow:
        async with self._lock(row.id):
            row = await self._current(row.id)
            if row.status is SandboxStatus.RUNNING:
                return row
            if row.status is not SandboxStatus.PAUSED:
                self._refuse(row, "resumed")
            handle = handle_of(row)
            assert handle is not None
            try:
                await self.provider.resume(handle)
            except ProviderError as exc:
                await rows.set_status(self.db, row.id, SandboxStatus.ERROR, str(exc))
                raise Conflict(f"sandbox {row.id} cannot be resumed: {exc}") from None
            await rows.set_status(self.db, row.id, SandboxStatus.RUNNING)
            async with self.db.begin() as conn:
                await rows.touch(conn, row.id, now())
            return await self._current(row.id)

    @staticmethod
    def _refuse(row: SandboxRow, what: str) -> None:
        if row.status is SandboxStatus.MISSING:
            raise Gone(f"sandbox {row.id} is MISSING: it cannot be {what}")
        if row.status is SandboxStatus.ERROR:
            raise Conflict(f"sandbox {row.id} is in ERROR: it cannot be {what}")
        raise Conflict(f"sandbox {row.id} is {row.status.value}: it cannot be {what} now")

    async def destroy(self, row: SandboxRow) -> None:
        """MISSING first (so nothing new is placed there), then the provider cleans up."""
        async with self._lock(row.id):
            row = await self._current(row.id)
            if row.status is SandboxStatus.MISSING:
                return
            await rows.set_status(self.db, row.id, SandboxStatus.MISSING, "deleted",
                                  unless_terminal=False)
            start = self._starts.get(row.id)
        if start is not None:
            await asyncio.wait([start], timeout=30)  # its end sees MISSING and destroys
            row = await self._current(row.id)
        handle = handle_of(row) or await self.provider.recover(self._launch(row))
        await self.provider.destroy(row.id, handle, Path(row.root_dir))
        self._locks.pop(row.id, None)  # MISSING is final: nothing waits on this lock again

    async def _current(self, sandbox_id: str) -> SandboxRow:
        row = await rows.get(self.db, sandbox_id)
        if row is None:
            raise Gone(f"sandbox {sandbox_id} is gone")
        return row

    # -- adoption and health ------------------------------------------------------------------

    async def adopt(self) -> None:
        """After a (re)start: adopt what still runs, mark what vanished MISSING, and start again
        the sandboxes whose start was cut short."""
        for row in await rows.live(self.db):
            handle = handle_of(row)
            if handle is None:
                handle = await self.provider.recover(self._launch(row))
                if handle is None:
                    if row.status is SandboxStatus.STARTING:
                        logger.info("starting sandbox %s again (its start was cut short)", row.id)
                        self.launch(row)
                    else:
                        await rows.set_status(self.db, row.id, SandboxStatus.MISSING,
                                              "the sandbox vanished while the control plane was down")
                    continue
                await rows.set_fields(self.db, row.id, pid=handle.pid,
                                      pid_start_time=handle.pid_start_time, port=handle.port)
            liveness = await self.provider.inspect(handle)
            if liveness is Liveness.GONE:
                await rows.set_status(self.db, row.id, SandboxStatus.MISSING,
                                      "the sandbox vanished while the control plane was down")
            elif liveness is Liveness.STOPPED:
                await rows.set_status(self.db, row.id, SandboxStatus.PAUSED)
            elif liveness is Liveness.ALIVE:
                await rows.set_status(self.db, row.id, SandboxStatus.RUNNING)
            else:
                await rows.set_status(self.db, row.id, SandboxStatus.ERROR,
                                      "the agent server stopped answering")
            logger.info("sandbox %s after restart: %s", row.id, liveness.value)

    def start_health_checks(self) -> None:
        self._health = asyncio.create_task(self._health_loop(), name="sandbox health")

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval)
            try:
                await self.check_health()
            except Exception:  # the loop must outlive one bad round (e.g. the database away)
                logger.exception("sandbox health check failed")

    async def check_health(self) -> None:
        """A RUNNING or PAUSED sandbox whose process is gone is in ERROR (SPEC 3.1); so is a
        RUNNING one that stops answering for UNRESPONSIVE_LIMIT checks in a row."""
        for row in await rows.live(self.db):
            handle = handle_of(row)
            if handle is None or row.status is SandboxStatus.STARTING:
                continue
            liveness = await self.provider.inspect(handle)
            if liveness is Liveness.GONE:
                await rows.set_status(self.db, row.id, SandboxStatus.ERROR,
                                      "the agent server exited unexpectedly")
            elif liveness is Liveness.UNRESPONSIVE and row.status is SandboxStatus.RUNNING:
                self._silent[row.id] = self._silent.get(row.id, 0) + 1
                if self._silent[row.id] >= UNRESPONSIVE_LIMIT:
                    await rows.set_status(self.db, row.id, SandboxStatus.ERROR,
                                          "the agent server stopped answering its health check")
                continue
            self._silent.pop(row.id, None)

    async def close(self, stop_sandboxes: bool = False) -> None:
        if self._health is not None:
            self._health.cancel()
        for task in list(self._starts.values()):
            task.cancel()
        if stop_sandboxes:
            for row in await rows.live(self.db):
                await self.destroy(row)
        await self.provider.close()
