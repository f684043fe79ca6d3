"""SandboxService: keeps the stored sandbox rows and the provider's sandboxes in step.

Rows are the truth for users (status, ownership, activity); the provider is the truth for
processes. Each transition is: act on the provider, then store the outcome, under the
sandbox's guard: a lock in this process and a lease in the database (`leases`), so that of
several control planes on one database only one acts on a sandbox at a time, and a start,
pause, resume or deletion is never run twice. A status moves only along
`models.SANDBOX_TRANSITIONS`, checked twice: here, to refuse a request naming the moves there are
(`transition`), and by the store on the row as it is when the move is written (a deletion waits for
no guard, and wins). The drift check (`sandboxes.drift`) looks at each sandbox for the reconciler;
the runs inside a sandbox are paused and continued around a pause over HTTP (`control_plane.runs`).

Clean-up (`clean_up`) follows every ERROR and MISSING: the process or container, the files or
volume go, the workspace archived first. A row keeps `cleanup_after` until that succeeded, so a
clean-up that failed (Docker away, a volume still in use) is tried again by the reconciler, and
at once when the user deletes the sandbox: nothing of a sandbox is left for ever.
A status change with a reason (`models.SandboxReason`) is also told to each conversation of
the sandbox (`sandboxes.notices`), and a terminal one ends the runs that were going on.

A start (the row reserved, the sandbox booted in the background, the wait until it is RUNNING)
is the service's `starts` (`sandboxes.starts`): it takes the service's guard and stores its
moves here, and the lookups others share are its `rows` (`sandboxes.rows`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from control_plane.agent_client import Target
from control_plane.crypto import Cipher, sandbox_token, webhook_secret
from control_plane.leases import SANDBOX, Leases
from control_plane.models import DiskUsage, SandboxReason, SandboxRow, SandboxStatus, transition
from control_plane.network.policy import OPEN, NetworkPolicy
from control_plane.runs import Runs
from control_plane.sandboxes import notices
from control_plane.sandboxes.provider import Handle, Launch, ProviderError, Refused, SandboxProvider
from control_plane.sandboxes.rows import SandboxRows
from control_plane.sandboxes.starts import Starts, handle_of
from control_plane.store import Database, accounts, conversations, events
from control_plane.store import sandboxes as rows
from control_plane.store.db import describe
from web.errors import Conflict, NotFound

logger = logging.getLogger(__name__)

#: The webhook's path under a control plane's address.
WEBHOOKS = "/api/v1/webhooks"
#: Seconds before a clean-up that failed (Docker away, a volume still in use) is tried again.
CLEANUP_RETRY = 60.0


class SandboxService:
    """One per control plane: every move of a sandbox, under its guard. It owns the lookups
    others share (`rows`) and the start machinery (`starts`), which asks it for the guard."""

    def __init__(
        self,
        db: Database,
        provider: SandboxProvider,
        cipher: Cipher,
        leases: Leases,
        *,
        sandboxes_dir: Path,
        webhook_url: str,
        runs: Runs | None = None,
        ring: Callable[[str], None] | None = None,
        max_per_user: int = 50,
        max_live: int = 1000,
        memory_floor: int = 0,
        guard_timeout: float = 120,
        hibernation: str = "off",
    ) -> None:
        """`hibernation`: which pauses hibernate a sandbox (`Config.sandbox_hibernation`)."""
        self.db, self.provider, self.cipher, self.leases = db, provider, cipher, leases
        self.rows = SandboxRows(db)  # the lookups (by id, by session key) others share
        self.starts = Starts(
            self,
            db,
            provider,
            cipher,
            sandboxes_dir=sandboxes_dir,
            max_per_user=max_per_user,
            max_live=max_live,
            memory_floor=memory_floor,
        )
        self.webhook_url = webhook_url
        #: How a sandbox reaches this control plane (its webhook, LLM gateway and other
        #: sandbox-side routes are under it), as the sandbox's processes see it.
        self.control_plane_url = provider.inside(webhook_url.removesuffix(WEBHOOKS))
        self.runs, self.ring, self.guard_timeout = runs, ring, guard_timeout
        self.hibernation = hibernation
        #: Each sandbox's lock in this process, the guard's first half (`guard`).
        self._locks: dict[str, asyncio.Lock] = {}

    # -- rows --------------------------------------------------------------------------------

    async def owned(self, sandbox_id: str, user_id: str) -> SandboxRow:
        """The user's sandbox; NotFound for another user's as for an unknown one."""
        row = await rows.get(self.db, sandbox_id, user_id)
        if row is None:
            raise NotFound(f"sandbox {sandbox_id} not found")
        return row

    async def owned_many(self, ids: list[str], user_id: str) -> dict[str, SandboxRow]:
        """The user's sandboxes among `ids` (others, and unknown ids, are left out), in the
        order asked, read in one query (one per id took 0.35 s for 100 on a busy host)."""
        found = await rows.get_many(self.db, ids)
        return {i: found[i] for i in ids if i in found and found[i].user_id == user_id}

    async def search(
        self, user_id: str, status: SandboxStatus | None, *, limit: int, offset: int
    ) -> list[SandboxRow]:
        """The user's sandboxes, newest first."""
        return await rows.search(self.db, user_id, status=status, limit=limit, offset=offset)

    async def conversation_counts(self, sandbox_ids: list[str]) -> dict[str, int]:
        return await rows.conversation_counts(self.db, sandbox_ids)

    async def create(
        self, user_id: str, spec_id: str | None, network: NetworkPolicy = OPEN
    ) -> SandboxRow:
        """A sandbox of the spec (the first by default), started in the background: the
        answer comes at once, STARTING. InvalidInput at `sandbox_spec_id` for an unknown
        spec, LimitReached past the per-user bound."""
        async with self.db.begin() as conn:
            await accounts.lock_user(conn, user_id)  # the per-user limit counts under the lock
            spec_id = spec_id or self.provider.specs()[0].id
            row = await self.starts.new_row(conn, user_id, spec_id, network)
        self.starts.launch(row, fresh=True)
        return row

    async def rename(self, row: SandboxRow, name: str) -> SandboxRow:
        """The sandbox under a new readable name (any status: a name is only for people);
        Conflict when another of the user's sandboxes has it."""
        if not await rows.rename(self.db, row, name):
            raise Conflict(f"another of your sandboxes is named {name!r}")
        return await self.rows.current(row.id)

    def session_key(self, row: SandboxRow) -> str:
        return self.cipher.decrypt(row.session_key_enc)

    def working_dir(self, row: SandboxRow) -> str:
        """Its workspace as its processes see it (conversations work in directories under it)."""
        return str(self.provider.working_dir(Path(row.root_dir)))

    def disk(self, row: SandboxRow) -> DiskUsage | None:
        """What its own filesystem holds (None: it has none, or it is gone)."""
        if row.status not in (SandboxStatus.STARTING, SandboxStatus.RUNNING, SandboxStatus.PAUSED):
            return None
        return self.provider.disk(row.id, Path(row.root_dir))

    def url(self, row: SandboxRow) -> str | None:
        handle = handle_of(row)
        return None if handle is None else self.provider.url(handle)

    def app_host(self, row: SandboxRow) -> str | None:
        """The sandbox's own address, where the control plane reaches the web apps it serves on
        its ports (`control_plane.app_urls`); None where it has none of its own: it shares this
        host's network (a loopback address would reach this host's services, not its apps), or
        its kind reaches it through a published port (Docker, Swarm)."""
        handle = handle_of(row)
        if handle is None or self.provider.sandbox_side is None:
            return None
        try:
            address = ipaddress.ip_address(handle.host)
        except ValueError:
            return None
        return None if address.is_loopback or address.is_unspecified else str(address)

    def target(self, row: SandboxRow) -> Target | None:
        """Its agent server (address and key); None before it has come up."""
        url = self.url(row)
        return None if url is None else Target(url, self.session_key(row))

    def launch_of(self, row: SandboxRow) -> Launch:
        """What the provider starts (or finds again) it from."""
        return Launch(
            sandbox_id=row.id,
            spec_id=row.spec_id,
            root_dir=Path(row.root_dir),
            session_api_key=self.session_key(row),
            webhook_url=self.provider.inside(self.webhook_url),
            webhook_secret=webhook_secret(self.cipher, row.id, row.session_key_hash),
            network=row.network,
            network_url=f"{self.control_plane_url}/api/v1/sandboxes/{row.id}/network",
            token=sandbox_token(self.cipher, row.id, row.session_key_hash),
        )

    async def current(self, sandbox_id: str) -> SandboxRow:
        """The row as it is now: read again once the guard is held, since what others did
        before (a pause, a deletion, a start) is only known from it."""
        return await self.rows.current(sandbox_id)

    def acting_on(self, sandbox_id: str) -> bool:
        """Whether this process holds the sandbox's guard right now (a start, pause, resume or
        deletion under way here)."""
        lock = self._locks.get(sandbox_id)
        return lock is not None and lock.locked()

    @contextlib.asynccontextmanager
    async def guard(
        self, sandbox_id: str, wait: bool = True, leased: bool = False
    ) -> AsyncIterator[bool]:
        """Hold the sandbox: this process's lock, then the database lease. With `wait` False,
        yields False at once when another holds it (the reconciler then leaves it alone).
        `leased`: this process took the lease already (with a row it made), so only the lock
        is waited for; the lease is released at the end all the same (as it is when another
        guard of this process comes first: a lease is this process's, not a guard's)."""
        lock = self._locks.setdefault(sandbox_id, asyncio.Lock())
        if not wait and lock.locked():
            yield False
            return
        async with lock:
            if wait and not leased:
                await self.leases.acquire(SANDBOX, sandbox_id, self.guard_timeout)
            elif not leased and not await self.leases.claim(SANDBOX, sandbox_id):
                yield False
                return
            try:
                yield True
            finally:
                try:
                    await self.leases.release(SANDBOX, sandbox_id)
                except SQLAlchemyError as exc:  # the database away: the lease simply expires
                    logger.warning(
                        "releasing the lease of sandbox %s failed: %s", sandbox_id, describe(exc)
                    )

    async def enter(
        self,
        sandbox_id: str,
        status: SandboxStatus,
        reason: SandboxReason | None,
        detail: str | None = None,
        *,
        announce: bool = True,
        touch: bool = False,
    ) -> SandboxRow | None:
        """Store a move (only one the table allows from the row's status as it is then); with a
        reason, tell its conversations too. The row as moved; None when it was not moved."""
        moved = await rows.set_status(
            self.db, sandbox_id, status, detail, reason=reason, touch=touch
        )
        if moved is not None and reason is not None and announce:
            await notices.tell(self.db, self.ring, sandbox_id, status, reason, detail)
        return moved

    # -- transitions -----------------------------------------------------------------------

    async def pause(
        self,
        row: SandboxRow,
        reason: SandboxReason = SandboxReason.USER,
        detail: str | None = None,
        *,
        when: Callable[[SandboxRow], bool] | None = None,
        brief: bool = False,
        hibernate: bool | None = None,
    ) -> SandboxRow:
        """Capacity released, state kept; `detail` is shown as status_detail.

        Runs in flight are paused by the agent server first (`runs`: between steps, for a
        bounded time), then the sandbox is frozen: nothing is cut mid-step that had time to
        finish. The pause is recorded as under way first (`pausing_reason`), so a control plane
        that dies half-way leaves a sandbox the next one finishes pausing (`drift`), not one it
        takes for hung.
        `when`: a condition on the current row (a timer still due); not met, nothing happens.
        `brief`: the refreeze after a brief thaw (no notice, no runs touched).
        `hibernate`: its processes ended and its memory freed, not frozen, where the provider
        can (`SandboxProvider.hibernate`); None: as `hibernation` says for `reason`."""
        async with self.guard(row.id):
            row = await self.current(row.id)
            if when is not None and not when(row):
                return row
            if not transition(row.id, row.status, SandboxStatus.PAUSED, "paused"):
                return row
            handle = handle_of(row)
            assert handle is not None
            await rows.set_fields(
                self.db, row.id, pausing_reason=reason.value, pausing_detail=detail
            )
            if hibernate is None:
                timers = reason in (SandboxReason.IDLE, SandboxReason.SESSION_CAP)
                hibernate = self.hibernation == "always" or (self.hibernation == "idle" and timers)
            try:
                paused = await self.freeze(
                    row, handle, reason, detail, brief=brief, hibernate=hibernate
                )
            except Exception:  # not under way any more (a shutdown's cancellation leaves it)
                await rows.set_fields(self.db, row.id, pausing_reason=None, pausing_detail=None)
                raise
            return paused or await self.current(row.id)

    async def freeze(
        self,
        row: SandboxRow,
        handle: Handle,
        reason: SandboxReason,
        detail: str | None,
        *,
        brief: bool = False,
        hibernate: bool = False,
    ) -> SandboxRow | None:
        """The pause's work, under the guard: runs paused, the sandbox frozen (or hibernated:
        its processes ended, its handle forgotten, so nothing looks for them), PAUSED stored
        (the row as paused; None when it was deleted meanwhile)."""
        target = self.target(row)
        if not brief and self.runs is not None and target is not None:
            await self.runs.pause(row.id, target)
        try:
            if hibernate and self.provider.hibernates:
                await self.provider.hibernate(handle, Path(row.root_dir))
                await rows.set_fields(self.db, row.id, ref=None, port=None, host=None)
            else:
                await self.provider.pause(handle)
        except ProviderError as exc:
            await self.enter(row.id, SandboxStatus.ERROR, SandboxReason.UNHEALTHY, str(exc))
            raise Conflict(f"sandbox {row.id} cannot be paused: {exc}") from None
        return await self.enter(row.id, SandboxStatus.PAUSED, reason, detail, announce=not brief)

    async def resume(
        self, row: SandboxRow, reason: SandboxReason = SandboxReason.USER, *, brief: bool = False
    ) -> SandboxRow:
        """Thaw it; a new 12-hour window opens, and runs paused by `pause` go on."""
        async with self.guard(row.id):
            row = await self.current(row.id)
            if row.status is SandboxStatus.STARTING:  # it comes up by itself: not a thaw
                raise Conflict(
                    f"sandbox {row.id} is STARTING: it is RUNNING once it has come "
                    "up, and cannot be resumed now"
                )
            if not transition(row.id, row.status, SandboxStatus.RUNNING, "resumed"):
                return row
            handle = handle_of(row)
            try:
                # Hibernated (no handle): started again from its files, as after a restart.
                moved = await (
                    self.provider.create(self.launch_of(row))
                    if handle is None
                    else self.provider.resume(handle)
                )
            except Refused as exc:  # intact, only not now (its node is down): stays PAUSED
                raise Conflict(f"sandbox {row.id} cannot be resumed now: {exc}") from None
            except ProviderError as exc:
                await self.enter(row.id, SandboxStatus.ERROR, SandboxReason.UNHEALTHY, str(exc))
                raise Conflict(f"sandbox {row.id} cannot be resumed: {exc}") from None
            if moved != handle:  # a cluster's new task: the row follows
                await rows.set_fields(self.db, row.id, **moved.stored())
            # A resume is activity: the idle time counts from it.
            resumed = await self.enter(
                row.id,
                SandboxStatus.RUNNING,
                None if brief else reason,
                None if brief else "resumed",
                touch=True,
            )
            if resumed is None:  # deleted while it thawed: nothing to go on with
                return await self.current(row.id)
            target = self.target(resumed)
            if not brief and self.runs is not None and target is not None:
                await self.runs.resume(row.id, target)
            return resumed

    async def destroy(
        self, row: SandboxRow, reason: SandboxReason = SandboxReason.USER, detail: str = "deleted"
    ) -> None:
        """MISSING first (so nothing new is placed there, and a start in flight stops its own
        process when it ends), then the provider cleans up once the guard is free. A sandbox
        already ERROR or MISSING whose remains are still there (its clean-up failed) is
        cleaned up now."""
        row = await self.current(row.id)
        if row.status is SandboxStatus.MISSING and row.cleanup_after is None:
            return
        await self.enter(row.id, SandboxStatus.MISSING, reason, detail)
        await self.clean_up(row.id, due_only=False)

    async def expire(
        self, row: SandboxRow, detail: str, *, when: Callable[[SandboxRow], bool]
    ) -> bool:
        """The deletion time: its conversations and their events are deleted for good, then
        the sandbox (MISSING). All under the guard, so nothing resumes it half-way; cut short,
        the next round finds it still PAUSED and due, and finishes."""
        async with self.guard(row.id):
            row = await self.current(row.id)
            if not when(row):
                return False
            for conversation_id in await conversations.in_sandbox(self.db, row.id):
                async with self.db.begin() as conn:
                    await conversations.remove(conn, conversation_id)
                await events.remove(self.db, conversation_id)
            await self.enter(row.id, SandboxStatus.MISSING, SandboxReason.DELETION_TIME, detail)
            await self.clean(row)
        self._locks.pop(row.id, None)
        return True

    async def clean_up(self, sandbox_id: str, *, wait: bool = True, due_only: bool = True) -> None:
        """Remove what is left of an ERROR or MISSING sandbox (`cleanup_after`): its process
        or container, its files or volume (the workspace archived first). `due_only`: only
        once `cleanup_after` has come (the reconciler); `wait` False: not when another acts
        on it right now."""
        async with self.guard(sandbox_id, wait=wait) as mine:
            if not mine:
                return
            row = await rows.get(self.db, sandbox_id)  # the guard's read: cleaned up meanwhile?
            if row is None or not row.status.terminal or row.cleanup_after is None:
                return
            if due_only and row.cleanup_after > self.db.now():
                return
            await self.clean(row)
        if row.status is SandboxStatus.MISSING:
            self._locks.pop(sandbox_id, None)  # final: nothing waits on this lock again

    async def lose(
        self, row: SandboxRow, status: SandboxStatus, reason: SandboxReason, detail: str
    ) -> None:
        """ERROR or MISSING found by the drift check, under the guard: recorded (and told),
        then whatever is left of it is cleaned up (its workspace archived; tried again later if
        that fails); the transcript stays in the store."""
        await self.enter(row.id, status, reason, detail)
        await self.clean(row)

    async def clean(self, row: SandboxRow) -> bool:
        """The clean-up under the guard, its outcome stored: done, or to be tried again
        `CLEANUP_RETRY` seconds later (Docker away, a volume held by another container)."""
        try:
            handle = handle_of(row) or await self.provider.recover(self.launch_of(row))
            await self.provider.destroy(row.id, handle, Path(row.root_dir))
        except Exception as exc:
            logger.warning(
                "cleaning up sandbox %s failed (tried again in %g s): %s",
                row.id,
                CLEANUP_RETRY,
                exc,
            )
            await rows.set_fields(
                self.db, row.id, cleanup_after=self.db.now() + timedelta(seconds=CLEANUP_RETRY)
            )
            return False
        await rows.set_fields(self.db, row.id, cleanup_after=None)
        return True

    async def close(self, stop_sandboxes: bool = False) -> None:
        await self.starts.close()
        if stop_sandboxes:
            # All at once: one after another (each a grace and an archive), a supervisor that
            # kills a slow exit (docker stop: 10 s) left the rest running.
            live = await rows.live(self.db)
            done = await asyncio.gather(*map(self.destroy, live), return_exceptions=True)
            for row, outcome in zip(live, done):
                if isinstance(outcome, BaseException):
                    logger.warning("stopping sandbox %s on exit failed: %r", row.id, outcome)
        await self.provider.close()
