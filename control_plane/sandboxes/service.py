"""SandboxService: keeps the stored sandbox rows and the provider's sandboxes in step.

Rows are the truth for users (status, ownership, activity); the provider is the truth for
processes. Each transition is: act on the provider, then store the outcome, under the
sandbox's guard: a lock in this process and a lease in the database (`leases`), so that of
several control planes on one database only one acts on a sandbox at a time, and a start,
pause, resume or deletion is never run twice.

`reconcile` is the drift check the reconciler (`lifecycle`) runs on each sandbox: what is still
there is adopted, a sandbox whose process vanished is MISSING, one failing its health check
for `health_grace` seconds is ERROR (both read-only from then on, SPEC 3.1; their process and
files are cleaned up, the transcript stays in the store), a start whose launcher died is taken
over, a pause whose control plane died half-way is finished.

Clean-up (`clean_up`) follows every ERROR and MISSING: the process or container, the files or
volume go, the workspace archived first. A row keeps `cleanup_after` until that succeeded, so a
clean-up that failed (Docker away, a volume still in use) is tried again by the reconciler, and
at once when the user deletes the sandbox: nothing of a sandbox is left for ever.

A status change with a reason (`models.SandboxReason`) is also told to each conversation of
the sandbox, as a ConversationStateUpdateEvent (key `sandbox_status`) in its stored events: the
user reads why a run stopped where they read the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncConnection

from control_plane.agent_client import AgentClient, AgentError, Target
from control_plane.crypto import Cipher, hash_key, new_key
from control_plane.leases import SANDBOX, Leases
from control_plane.models import SandboxReason, SandboxStatus, now
from control_plane.sandboxes.provider import (
    Handle,
    Launch,
    Liveness,
    ProviderError,
    Refused,
    SandboxProvider,
)
from control_plane.store import Database, conversations, events
from control_plane.store import sandboxes as rows
from control_plane.store.sandboxes import SandboxRow
from events.kinds import ConversationStateUpdateEvent, format_timestamp
from web.errors import Conflict, Forbidden, Gone, LimitReached, Unavailable

logger = logging.getLogger(__name__)

#: The key of the state updates that tell a conversation its sandbox's status changed.
NOTICE_KEY = "sandbox_status"
#: Seconds before a clean-up that failed (Docker away, a volume still in use) is tried again.
CLEANUP_RETRY = 60.0


def handle_of(row: SandboxRow) -> Handle | None:
    if row.pid is None or row.pid_start_time is None or row.port is None:
        return None
    return Handle(sandbox_id=row.id, pid=row.pid, pid_start_time=row.pid_start_time,
                  port=row.port, host=row.host or Handle.host)


def handle_fields(handle: Handle) -> dict[str, object]:
    """What is stored of a handle (`handle_of` reads it back)."""
    return {"pid": handle.pid, "pid_start_time": handle.pid_start_time, "port": handle.port,
            "host": None if handle.host == Handle.host else handle.host}


class SandboxService:
    def __init__(self, db: Database, provider: SandboxProvider, cipher: Cipher, leases: Leases, *,
                 sandboxes_dir: Path, webhook_url: str, agents: AgentClient | None = None,
                 ring: Callable[[str], None] | None = None, max_per_user: int = 50,
                 health_grace: float = 30.0, pause_grace: float = 30.0,
                 guard_timeout: float = 120.0) -> None:
        self.db = db
        self.provider = provider
        self.cipher = cipher
        self.leases = leases
        self.sandboxes_dir = sandboxes_dir
        self.webhook_url = webhook_url
        self.agents = agents
        self.ring = ring
        self.max_per_user = max_per_user
        self.health_grace = health_grace
        self.pause_grace = pause_grace
        self.guard_timeout = guard_timeout
        self._starts: dict[str, asyncio.Task[None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    # -- rows --------------------------------------------------------------------------------

    async def new_row(self, conn: AsyncConnection, user_id: str, spec_id: str) -> SandboxRow:
        """A STARTING row inside the caller's transaction; `launch()` starts it after commit.

        The caller holds the user's lock (`accounts.lock_user`), so the count below holds."""
        if spec_id not in {spec.id for spec in self.provider.specs()}:
            raise Conflict(f"unknown sandbox spec {spec_id!r}")
        if self.provider.single_tenant and await rows.another_user_has_one(conn, user_id):
            raise Forbidden("this control plane's sandboxes are not isolated from each other "
                            "(bubblewrap is unavailable or off, as its log said at start): they "
                            "serve one user only, unless its operator accepts a shared host "
                            "(CONTROL_PLANE_SHARED_HOST=true)")
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

    @contextlib.asynccontextmanager
    async def _guard(self, sandbox_id: str, wait: bool = True) -> AsyncIterator[bool]:
        """Hold the sandbox: this process's lock, then the database lease. With `wait` False,
        yields False at once when another holds it (the reconciler then leaves it alone)."""
        lock = self._locks.setdefault(sandbox_id, asyncio.Lock())
        if not wait and lock.locked():
            yield False
            return
        async with lock:
            if wait:
                await self.leases.acquire(SANDBOX, sandbox_id, self.guard_timeout)
            elif not await self.leases.claim(SANDBOX, sandbox_id):
                yield False
                return
            try:
                yield True
            finally:
                await self.leases.release(SANDBOX, sandbox_id)

    async def _set(self, sandbox_id: str, status: SandboxStatus, reason: SandboxReason | None,
                   detail: str | None = None, *, unless_terminal: bool = True,
                   announce: bool = True) -> bool:
        """Store a status; with a reason, tell its conversations too. True when it changed."""
        changed = await rows.set_status(self.db, sandbox_id, status, detail, reason=reason,
                                        unless_terminal=unless_terminal)
        if changed and reason is not None and announce:
            await self._announce(sandbox_id, status, reason, detail)
        return changed

    async def _announce(self, sandbox_id: str, status: SandboxStatus, reason: SandboxReason,
                        detail: str | None) -> None:
        """A ConversationStateUpdateEvent in each of the sandbox's conversations."""
        try:
            moment = format_timestamp(now())
            found = await conversations.in_sandbox(self.db, sandbox_id)
            batch = []
            for conversation_id in found:
                event = ConversationStateUpdateEvent(
                    id=str(uuid.uuid4()), timestamp=moment, key=NOTICE_KEY,
                    value={"sandbox_id": sandbox_id, "status": status.value,
                           "reason": reason.value, "detail": detail})
                batch.append({"conversation_id": conversation_id, "event_id": event.id,
                              "kind": event.kind, "source": event.source,
                              "timestamp": event.timestamp, "body": event.model_dump_json()})
            await events.insert_batch(self.db, batch)
        except Exception:  # the status is stored; a lost notice must not undo or hide it
            logger.exception("telling the conversations of sandbox %s failed", sandbox_id)
            return
        if self.ring is not None:
            for conversation_id in found:
                self.ring(conversation_id)

    # -- transitions -----------------------------------------------------------------------

    def launch(self, row: SandboxRow, *, fresh: bool = False) -> None:
        """Start a STARTING sandbox in the background (POST /sandboxes answers at once).

        `fresh`: this process has just made the row, so no earlier start can have left a
        process behind; otherwise (a start taken over) the provider is asked first."""
        if row.id not in self._starts:
            task = asyncio.create_task(self._start(row.id, fresh), name=f"start sandbox {row.id}")
            self._starts[row.id] = task
            task.add_done_callback(lambda _: self._starts.pop(row.id, None))

    async def _start(self, sandbox_id: str, fresh: bool) -> None:
        async with self._guard(sandbox_id, wait=False) as mine:
            if not mine:
                return  # another process starts it (or acts on it): wait_running polls
            row = await rows.get(self.db, sandbox_id)
            if row is None or row.status is not SandboxStatus.STARTING or handle_of(row) is not None:
                return
            launch = self._launch(row)
            try:
                handle = None if fresh else await self.provider.recover(launch)
                if handle is None:
                    handle = await self.provider.create(launch)
            except ProviderError as exc:
                await self._set(row.id, SandboxStatus.ERROR, SandboxReason.START_FAILED, str(exc))
                return
            except Exception as exc:  # never leave a row STARTING for ever
                logger.exception("starting sandbox %s failed", row.id)
                await self._set(row.id, SandboxStatus.ERROR, SandboxReason.START_FAILED,
                                f"start failed: {exc}")
                return
            await rows.set_fields(self.db, row.id, **handle_fields(handle))
            if not await rows.set_status(self.db, row.id, SandboxStatus.RUNNING):
                # Deleted while it booted: the row is MISSING already, so the process goes too.
                await self.provider.destroy(row.id, handle, Path(row.root_dir))

    async def wait_running(self, sandbox_id: str, timeout: float = 120.0) -> SandboxRow:
        """Until RUNNING (started or resumed as needed); Conflict or Gone when it cannot be."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        next_launch = loop.time()
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
            if row.id not in self._starts and handle_of(row) is None and loop.time() >= next_launch:
                # Nobody here starts it: take the start over if its launcher is gone (the
                # lease tells; a live launcher elsewhere keeps it and this just waits).
                self.launch(row)
                next_launch = loop.time() + 1.0
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise Unavailable(f"sandbox {sandbox_id} is still STARTING")
            start = self._starts.get(row.id)
            if start is not None:  # started here: wake when it ends, not by polling
                await asyncio.wait([start], timeout=remaining)
            else:
                await asyncio.sleep(0.05)

    async def pause(self, row: SandboxRow, reason: SandboxReason = SandboxReason.USER,
                    detail: str | None = None, *, when: Callable[[SandboxRow], bool] | None = None,
                    brief: bool = False) -> SandboxRow:
        """Capacity released, state kept; `detail` is shown as status_detail.

        Runs in flight are paused by the agent server first (between steps, `pause_grace` at
        most), then the sandbox is frozen: nothing is cut mid-step that had time to finish.
        The pause is recorded as under way first (`pausing_reason`), so a control plane that
        dies half-way leaves a sandbox the next one finishes pausing (`_check`), not one it
        takes for hung.
        `when`: a condition on the current row (a timer still due); not met, nothing happens.
        `brief`: the refreeze after a brief thaw (no notice, no runs touched)."""
        async with self._guard(row.id):
            row = await self._current(row.id)
            if when is not None and not when(row):
                return row
            if row.status is SandboxStatus.PAUSED:
                return row
            if row.status is not SandboxStatus.RUNNING:
                self._refuse(row, "paused")
            handle = handle_of(row)
            assert handle is not None
            await rows.set_fields(self.db, row.id, pausing_reason=reason.value,
                                  pausing_detail=detail)
            try:
                await self._freeze(row, handle, reason, detail, brief=brief)
            except Exception:  # not under way any more (a shutdown's cancellation leaves it)
                await rows.set_fields(self.db, row.id, pausing_reason=None, pausing_detail=None)
                raise
            return await self._current(row.id)

    async def _freeze(self, row: SandboxRow, handle: Handle, reason: SandboxReason,
                      detail: str | None, *, brief: bool = False) -> None:
        """The pause's work, under the guard: runs paused, the sandbox frozen, PAUSED stored."""
        if not brief:
            await self._quiesce(row)
        try:
            await self.provider.pause(handle)
        except ProviderError as exc:
            await self._set(row.id, SandboxStatus.ERROR, SandboxReason.UNHEALTHY, str(exc))
            raise Conflict(f"sandbox {row.id} cannot be paused: {exc}") from None
        await self._set(row.id, SandboxStatus.PAUSED, reason, detail, announce=not brief)

    async def resume(self, row: SandboxRow, reason: SandboxReason = SandboxReason.USER, *,
                     brief: bool = False) -> SandboxRow:
        """Thaw it; a new 12-hour window opens, and runs paused by `pause` go on."""
        async with self._guard(row.id):
            row = await self._current(row.id)
            if row.status is SandboxStatus.RUNNING:
                return row
            if row.status is not SandboxStatus.PAUSED:
                self._refuse(row, "resumed")
            handle = handle_of(row)
            assert handle is not None
            try:
                moved = await self.provider.resume(handle)
            except Refused as exc:  # intact, only not now (its node is down): stays PAUSED
                raise Conflict(f"sandbox {row.id} cannot be resumed now: {exc}") from None
            except ProviderError as exc:
                await self._set(row.id, SandboxStatus.ERROR, SandboxReason.UNHEALTHY, str(exc))
                raise Conflict(f"sandbox {row.id} cannot be resumed: {exc}") from None
            if moved != handle:  # a cluster's new task: the row follows
                await rows.set_fields(self.db, row.id, **handle_fields(moved))
            await self._set(row.id, SandboxStatus.RUNNING, None if brief else reason,
                            None if brief else "resumed")
            async with self.db.begin() as conn:
                await rows.touch(conn, row.id, now())
            row = await self._current(row.id)
            if not brief:
                await self._continue_runs(row)
            return row

    async def _quiesce(self, row: SandboxRow) -> None:
        """Ask the agent server to pause each running conversation, and wait (bounded) until
        none runs; those it paused are marked to go on when the sandbox resumes."""
        url = self.url(row)
        if self.agents is None or url is None:
            return
        agents, target = self.agents, Target(url, self.session_key(row))

        async def running(conversation_id: str) -> bool:
            try:
                info = await agents.get_conversation(target, conversation_id)
            except AgentError:
                return False  # not there (never created, deleted): nothing to pause
            return str(info.get("execution_status", "")).lower() == "running"

        ids = await conversations.in_sandbox(self.db, row.id)
        flags = await asyncio.gather(*(running(c) for c in ids))
        busy = [c for c, flag in zip(ids, flags) if flag]
        for conversation_id in busy:
            try:
                await agents.post(target, f"/api/conversations/{conversation_id}/pause")
            except AgentError as exc:
                logger.warning("pausing conversation %s failed: %s", conversation_id, exc)
            await conversations.update_fields(self.db, conversation_id, touch=False,
                                              resume_run=True)
        deadline = asyncio.get_running_loop().time() + self.pause_grace
        while busy and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
            flags = await asyncio.gather(*(running(c) for c in busy))
            busy = [c for c, flag in zip(busy, flags) if flag]
        if busy:
            logger.info("sandbox %s frozen with %d run(s) mid-step after %g s", row.id, len(busy),
                        self.pause_grace)

    async def _continue_runs(self, row: SandboxRow) -> None:
        url = self.url(row)
        if self.agents is None or url is None:
            return
        target = Target(url, self.session_key(row))
        for conversation_id in await conversations.to_resume(self.db, row.id):
            try:
                await self.agents.post(target, f"/api/conversations/{conversation_id}/run")
            except AgentError as exc:
                logger.warning("continuing the run of %s failed: %s", conversation_id, exc)
            await conversations.update_fields(self.db, conversation_id, touch=False,
                                              resume_run=False)

    @staticmethod
    def _refuse(row: SandboxRow, what: str) -> None:
        if row.status is SandboxStatus.MISSING:
            raise Gone(f"sandbox {row.id} is MISSING: it cannot be {what}")
        if row.status is SandboxStatus.ERROR:
            raise Conflict(f"sandbox {row.id} is in ERROR: it cannot be {what}")
        raise Conflict(f"sandbox {row.id} is {row.status.value}: it cannot be {what} now")

    async def destroy(self, row: SandboxRow, reason: SandboxReason = SandboxReason.USER,
                      detail: str = "deleted") -> None:
        """MISSING first (so nothing new is placed there, and a start in flight stops its own
        process when it ends), then the provider cleans up once the guard is free. A sandbox
        already ERROR or MISSING whose remains are still there (its clean-up failed) is
        cleaned up now."""
        row = await self._current(row.id)
        if row.status is SandboxStatus.MISSING and row.cleanup_after is None:
            return
        if row.status is not SandboxStatus.MISSING:
            await self._set(row.id, SandboxStatus.MISSING, reason, detail, unless_terminal=False)
        await self.clean_up(row.id, due_only=False)

    async def expire(self, row: SandboxRow, detail: str, *,
                     when: Callable[[SandboxRow], bool]) -> bool:
        """The deletion time: its conversations and their events are deleted for good, then
        the sandbox (MISSING). All under the guard, so nothing resumes it half-way; cut short,
        the next round finds it still PAUSED and due, and finishes."""
        async with self._guard(row.id):
            row = await self._current(row.id)
            if not when(row):
                return False
            for conversation_id in await conversations.in_sandbox(self.db, row.id):
                async with self.db.begin() as conn:
                    await conversations.remove(conn, conversation_id)
                await events.remove(self.db, conversation_id)
            await self._set(row.id, SandboxStatus.MISSING, SandboxReason.DELETION_TIME, detail,
                            unless_terminal=False)
            await self._clean(await self._current(row.id))
        self._locks.pop(row.id, None)
        return True

    async def clean_up(self, sandbox_id: str, *, wait: bool = True,
                       due_only: bool = True) -> None:
        """Remove what is left of an ERROR or MISSING sandbox (`cleanup_after`): its process
        or container, its files or volume (the workspace archived first). `due_only`: only
        once `cleanup_after` has come (the reconciler); `wait` False: not when another acts
        on it right now."""
        async with self._guard(sandbox_id, wait=wait) as mine:
            if not mine:
                return
            row = await rows.get(self.db, sandbox_id)
            if row is None or not row.status.terminal or row.cleanup_after is None:
                return
            if due_only and row.cleanup_after > now():
                return
            await self._clean(row)
        if row.status is SandboxStatus.MISSING:
            self._locks.pop(sandbox_id, None)  # final: nothing waits on this lock again

    async def _clean(self, row: SandboxRow) -> bool:
        """`_cleanup` under the guard, its outcome stored: done, or to be tried again
        `CLEANUP_RETRY` seconds later (Docker away, a volume held by another container)."""
        try:
            await self._cleanup(row)
        except Exception as exc:
            logger.warning("cleaning up sandbox %s failed (tried again in %g s): %s", row.id,
                           CLEANUP_RETRY, exc)
            await rows.set_fields(self.db, row.id,
                                  cleanup_after=now() + timedelta(seconds=CLEANUP_RETRY))
            return False
        await rows.set_fields(self.db, row.id, cleanup_after=None)
        return True

    async def _cleanup(self, row: SandboxRow) -> None:
        handle = handle_of(row) or await self.provider.recover(self._launch(row))
        await self.provider.destroy(row.id, handle, Path(row.root_dir))

    async def _current(self, sandbox_id: str) -> SandboxRow:
        row = await rows.get(self.db, sandbox_id)
        if row is None:
            raise Gone(f"sandbox {sandbox_id} is gone")
        return row

    # -- drift -------------------------------------------------------------------------------

    async def reconcile(self, sandbox_id: str, *, adopting: bool = False) -> None:
        """One look at one sandbox: adopt it, start it again, or record that it drifted.

        `adopting`: the first look after this control plane started, when a RUNNING sandbox
        found frozen is one whose pause was cut short (PAUSED), not a hung one (a pause under
        way is recorded in the row, `pausing_reason`, so any control plane finishes it; this
        covers rows from before that record).

        An ERROR or MISSING sandbox is not looked at here; its remains are removed by
        `clean_up`."""
        relaunch: SandboxRow | None = None
        async with self._guard(sandbox_id, wait=False) as mine:
            if not mine:
                return  # another process acts on it right now
            row = await rows.get(self.db, sandbox_id)
            if row is None or row.status.terminal:
                return
            handle = handle_of(row)
            if handle is None:
                if row.status is SandboxStatus.STARTING and row.id in self._starts:
                    return
                handle = await self.provider.recover(self._launch(row))
                if handle is None:
                    if row.status is SandboxStatus.STARTING:
                        relaunch = row  # its launcher died before the sandbox came up
                    else:
                        await self._lost(row, SandboxStatus.MISSING, SandboxReason.VANISHED,
                                         "the sandbox vanished: its conversations are read-only")
                else:
                    await rows.set_fields(self.db, row.id, **handle_fields(handle))
            if handle is not None:
                await self._check(row, handle, adopting)
        if relaunch is not None:
            logger.info("starting sandbox %s again (its start was cut short)", relaunch.id)
            self.launch(relaunch)

    async def _check(self, row: SandboxRow, handle: Handle, adopting: bool) -> None:
        health = await self.provider.health(handle)
        liveness = health.liveness
        if liveness is Liveness.GONE:
            gone = health.detail or "the sandbox's process is gone"
            await self._lost(row, SandboxStatus.MISSING, SandboxReason.VANISHED,
                             f"{gone}: its conversations are read-only")
            return
        if (row.status is SandboxStatus.RUNNING and row.pausing_reason is not None
                and liveness in (Liveness.STOPPED, Liveness.ALIVE)):
            # A pause whose control plane died half-way: frozen already (only PAUSED was not
            # stored yet) or not; either way it is finished here, with its reason.
            logger.info("finishing the pause of sandbox %s (its control plane stopped half-way)",
                        row.id)
            if liveness is Liveness.STOPPED:
                await self._set(row.id, SandboxStatus.PAUSED, row.pausing_reason,
                                row.pausing_detail)
            else:
                with contextlib.suppress(Conflict):  # cannot be frozen: ERROR, stored
                    await self._freeze(row, handle, row.pausing_reason, row.pausing_detail)
            return
        if liveness is Liveness.STOPPED and row.status is not SandboxStatus.RUNNING:
            return  # paused, as it should be
        if liveness is Liveness.STOPPED and adopting:
            await self._set(row.id, SandboxStatus.PAUSED, None)  # a pause cut short
            return
        if liveness is Liveness.ALIVE:
            if row.status is not SandboxStatus.RUNNING:  # came up, or thawed: the record follows
                await self._set(row.id, SandboxStatus.RUNNING, None)
            elif row.unhealthy_since is not None:
                await rows.set_fields(self.db, row.id, unhealthy_since=None)
            return
        # Not answering (or frozen by someone else): ERROR once that has lasted the grace.
        moment = now()
        since = row.unhealthy_since
        if since is None:
            since = moment
            await rows.set_fields(self.db, row.id, unhealthy_since=moment)
        if (moment - since).total_seconds() >= self.health_grace:
            why = f" ({health.detail})" if health.detail else ""
            await self._lost(row, SandboxStatus.ERROR, SandboxReason.UNHEALTHY,
                             f"the agent server failed its health check for "
                             f"{self.health_grace:g} s{why}: its conversations are read-only")

    async def _lost(self, row: SandboxRow, status: SandboxStatus, reason: SandboxReason,
                    detail: str) -> None:
        """Terminal: recorded (and told), then whatever is left of it is cleaned up (its
        workspace archived; tried again later if that fails); the transcript stays in the
        store."""
        await self._set(row.id, status, reason, detail)
        await self._clean(row)

    async def adopt(self) -> None:
        """After a (re)start: one look at every live sandbox (see `reconcile`)."""
        for row in await rows.live(self.db):
            await self.reconcile(row.id, adopting=True)

    async def close(self, stop_sandboxes: bool = False) -> None:
        for task in list(self._starts.values()):
            task.cancel()
        if self._starts:
            await asyncio.wait(list(self._starts.values()), timeout=10)
        if stop_sandboxes:
            for row in await rows.live(self.db):
                await self.destroy(row)
        await self.provider.close()

