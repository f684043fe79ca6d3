"""Starts: how a sandbox comes up, from the row reserved for it to RUNNING.

A start has three steps, and each may be taken by a different job, or a different process:

1. Reserved (`new_row`): a STARTING row, written in the caller's transaction while it holds
   the user's lock, so the per-user and live bounds count what is there. The provider may name
   the sandbox (a warm pool's parked one); its session key is minted here, and only its hash
   and its encrypted form are stored.
2. Booted (`launch`): once that transaction has committed, a background job of this process
   takes the sandbox's guard without waiting for it (a holder elsewhere starts it, or acts on
   it), asks the provider for the sandbox (found again after a takeover, made otherwise) and
   stores its handle and RUNNING in one write. A start that fails ends ERROR with its reason,
   told to the sandbox's conversations; a sandbox deleted while it booted is destroyed at once,
   so no process runs unrecorded.
3. Waited for (`wait_running`): a start task (or any caller that needs the sandbox's agent
   server) waits until the row says RUNNING; a PAUSED sandbox is resumed on the way. A start
   task may begin earlier (`wait_serving`): a start of this process tells its row the moment
   its server answers, before the RUNNING write, so the conversation is asked for while that
   write is made (READY still waits for RUNNING).

Two background jobs meet in step 3: the start task and the sandbox's launch job. Started in
this process, the waiter is woken by the launch's future the moment RUNNING is stored (the
guard is released after it), not by polling. Started by another process, the waiter reads the
row every 50 ms, and once a second launches it here too: that launch finds the guard's lease
held while the other launcher lives, and leaves it; it takes the start over once that launcher
died (the reconciler's drift check, `sandboxes.drift`, also starts again a STARTING sandbox
whose launcher is gone). Each look reads the row, since its status is what is waited for; which
of the reads are a guard's and which are polls is said where each is made.

`SandboxService` owns the starts (`service.starts`), as it owns the rows: the guard, the stored
moves and a resume stay the service's, and a start asks for them through `Owner`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from control_plane.crypto import Cipher, hash_key, new_key
from control_plane.models import SandboxReason, SandboxRow, SandboxStatus, ensure_usable
from control_plane.network.policy import OPEN, NetworkPolicy
from control_plane.sandboxes.capacity import memory_short
from control_plane.sandboxes.provider import Handle, Launch, ProviderError, SandboxProvider
from control_plane.store import Database
from control_plane.store import sandboxes as rows
from control_plane.store.db import describe, retrying
from web.errors import Forbidden, Gone, LimitReached, Unavailable, invalid

logger = logging.getLogger(__name__)

#: Seconds between two takeovers a waiter tries of a start no job of this process runs.
RELAUNCH_PAUSE = 1.0
#: Seconds between two looks at the row while another process starts the sandbox.
POLL = 0.05


def handle_of(row: SandboxRow) -> Handle | None:
    """The provider's handle its start stored on the row; None before it has come up."""
    if row.ref is None or row.port is None:
        return None
    return Handle(sandbox_id=row.id, ref=row.ref, port=row.port, host=row.host or Handle.host)


class Owner(Protocol):
    """What a start asks of the service that owns it (`SandboxService`)."""

    def guard(
        self, sandbox_id: str, wait: bool = True, leased: bool = False
    ) -> AbstractAsyncContextManager[bool]:
        """The sandbox held: this process's lock, then the database lease (`leased`: taken
        already, with the row)."""
        ...

    async def enter(
        self,
        sandbox_id: str,
        status: SandboxStatus,
        reason: SandboxReason | None,
        detail: str | None = None,
    ) -> SandboxRow | None:
        """A move stored (and, with a reason, told to the sandbox's conversations)."""
        ...

    def launch_of(self, row: SandboxRow) -> Launch:
        """What the provider starts (or finds again) the sandbox from."""
        ...

    async def resume(self, row: SandboxRow) -> SandboxRow:
        """A PAUSED sandbox thawed."""
        ...


class Starts:
    """The starts of sandboxes in this process: one launch job per sandbox at most, and the
    waits for RUNNING."""

    def __init__(
        self,
        owner: Owner,
        db: Database,
        provider: SandboxProvider,
        cipher: Cipher,
        *,
        sandboxes_dir: Path,
        max_per_user: int,
        max_live: int,
        memory_floor: int,
    ) -> None:
        self.owner, self.db, self.provider, self.cipher = owner, db, provider, cipher
        self.sandboxes_dir = sandboxes_dir
        self.max_per_user, self.max_live, self.memory_floor = max_per_user, max_live, memory_floor
        #: The launch job of each sandbox this process is starting right now.
        self._jobs: dict[str, asyncio.Task[None]] = {}
        #: A start's RUNNING row, as soon as it is stored (its guard is released after): what
        #: the waiters of a start made here wake on.
        self._up: dict[str, asyncio.Future[SandboxRow]] = {}
        #: A start's row as its RUNNING write stores it, the moment its server answers (before
        #: that write): what `wait_serving` wakes on.
        self._serving: dict[str, asyncio.Future[SandboxRow]] = {}

    async def new_row(
        self, conn: AsyncConnection, user_id: str, spec_id: str, network: NetworkPolicy = OPEN
    ) -> SandboxRow:
        """A STARTING row inside the caller's transaction; `launch()` starts it after commit.

        The caller holds the user's lock (`accounts.lock_user`), so the count below holds."""
        if spec_id not in {spec.id for spec in self.provider.specs()}:
            raise invalid(["sandbox_spec_id"], f"unknown sandbox spec {spec_id!r}", input_=spec_id)
        if self.provider.single_tenant and await rows.another_user_has_one(conn, user_id):
            raise Forbidden(
                "this control plane's sandboxes are not isolated from each other "
                "(bubblewrap is unavailable or off, as its log said at start): they "
                "serve one user only, unless its operator accepts a shared host "
                "(CONTROL_PLANE_SHARED_HOST=true)"
            )
        refused = await rows.over_cap(
            conn, user_id, self.max_per_user, self.max_live
        ) or memory_short(self.memory_floor)
        if refused is not None:
            raise LimitReached(refused)
        sandbox_id = self.provider.reserve(spec_id) or uuid.uuid4().hex
        key = new_key("sk-sandbox")
        return await rows.insert(
            conn,
            self.db.now(),
            id=sandbox_id,
            user_id=user_id,
            spec_id=spec_id,
            session_key_hash=hash_key(key),
            session_key_enc=self.cipher.encrypt(key),
            root_dir=str(self.provider.root_dir(sandbox_id, self.sandboxes_dir)),
            network_policy=network.model_dump(mode="json"),
        )

    def starting(self, sandbox_id: str) -> bool:
        """Whether this process is starting it right now."""
        return sandbox_id in self._jobs

    def launch(self, row: SandboxRow, *, fresh: bool = False, leased: bool = False) -> None:
        """Start a STARTING sandbox in the background (POST /sandboxes answers at once).

        `fresh`: this process has just made the row, so no earlier start can have left a
        process behind; otherwise (a start taken over) the provider is asked first.
        `leased`: its lease was taken with the row (`Placer`), and the start releases it."""
        if row.id not in self._jobs:
            job = asyncio.create_task(
                self._start(row.id, fresh, leased), name=f"start sandbox {row.id}"
            )
            self._jobs[row.id] = job
            self._up[row.id] = up = asyncio.get_running_loop().create_future()
            self._serving[row.id] = serving = asyncio.get_running_loop().create_future()
            # In this order: no launch comes between (it is still starting) to lose its future.
            # Never RUNNING by this start, its waiters are woken by the cancellation (a future
            # already told is left as it is).
            job.add_done_callback(lambda _: self._up.pop(row.id, up).cancel())
            job.add_done_callback(lambda _: self._serving.pop(row.id, serving).cancel())
            job.add_done_callback(lambda _: self._jobs.pop(row.id, None))

    async def _start(self, sandbox_id: str, fresh: bool, leased: bool) -> None:
        """A background job: nothing escapes it unseen (`drift` sees the sandbox again)."""
        try:
            await self._start_once(sandbox_id, fresh, leased)
        except Exception as exc:
            logger.error(
                "starting sandbox %s failed: %s",
                sandbox_id,
                describe(exc) if isinstance(exc, SQLAlchemyError) else repr(exc),
            )

    async def _start_once(self, sandbox_id: str, fresh: bool, leased: bool) -> None:
        async with self.owner.guard(sandbox_id, wait=False, leased=leased) as mine:
            if not mine:
                return  # another process starts it (or acts on it): wait_running polls
            row = await rows.get(self.db, sandbox_id)  # the guard's read: started meanwhile?
            if (
                row is None
                or row.status is not SandboxStatus.STARTING
                or handle_of(row) is not None
            ):
                return
            launch = self.owner.launch_of(row)
            try:
                handle = None if fresh else await self.provider.recover(launch)
                if handle is None:
                    handle = await self.provider.create(launch)
            except ProviderError as exc:
                await self.owner.enter(
                    row.id, SandboxStatus.ERROR, SandboxReason.START_FAILED, str(exc)
                )
                return
            except Exception as exc:  # never leave a row STARTING for ever
                logger.exception("starting sandbox %s failed", row.id)
                await self.owner.enter(
                    row.id,
                    SandboxStatus.ERROR,
                    SandboxReason.START_FAILED,
                    f"start failed ({type(exc).__name__}); see the control plane's log",
                )
                return
            if (serving := self._serving.get(row.id)) is not None and not serving.done():
                serving.set_result(
                    dataclasses.replace(row, status=SandboxStatus.RUNNING, **handle.stored())
                )
            try:
                moved = await retrying(
                    lambda: self._started(row.id, handle), f"storing the start of sandbox {row.id}"
                )
            except SQLAlchemyError:
                moved = None  # not stored: no process runs unrecorded (started again later)
            if moved is None:  # (or deleted while it booted: the row is MISSING already)
                await self.provider.destroy(row.id, handle, Path(row.root_dir))
            elif (up := self._up.get(row.id)) is not None and not up.done():
                up.set_result(moved)  # its waiters go on while the guard is released

    async def _started(self, sandbox_id: str, handle: Handle) -> SandboxRow | None:
        """Its handle (ref, port, host) and RUNNING, in one write (None: deleted meanwhile)."""
        row = await rows.set_status(
            self.db, sandbox_id, SandboxStatus.RUNNING, fields=handle.stored()
        ) or await rows.get(self.db, sandbox_id)  # or stored by an earlier try
        return (
            row if row and row.status is SandboxStatus.RUNNING and row.ref == handle.ref else None
        )

    async def wait_serving(self, sandbox_id: str, timeout: float = 120.0) -> SandboxRow:
        """The row as its RUNNING write stores it, once its server answers: told by a start of
        this process before that write (which may still fail: RUNNING itself is
        `wait_running`'s to wait for); otherwise `wait_running`'s row."""
        serving = self._serving.get(sandbox_id)
        if serving is not None:
            await asyncio.wait([serving], timeout=timeout)
            if serving.done() and not serving.cancelled():
                return serving.result()
        return await self.wait_running(sandbox_id, timeout)

    async def wait_running(self, sandbox_id: str, timeout: float = 120.0) -> SandboxRow:
        """Until RUNNING (started or resumed as needed); Conflict or Gone when it cannot be."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        next_launch = loop.time()
        while True:
            # Each look reads the row: its status is what is waited for.
            row = await rows.get(self.db, sandbox_id)
            if row is None:
                raise Gone(f"sandbox {sandbox_id} is MISSING: it was deleted")
            ensure_usable(row.id, row.status, row.status_detail or "it cannot be used")
            if row.status is SandboxStatus.RUNNING:
                return row
            if row.status is SandboxStatus.PAUSED:
                return await self.owner.resume(row)
            if row.id not in self._jobs and handle_of(row) is None and loop.time() >= next_launch:
                # Nobody here starts it: take the start over if its launcher is gone (the
                # lease tells; a live launcher elsewhere keeps it and this just waits).
                self.launch(row)
                next_launch = loop.time() + RELAUNCH_PAUSE
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise Unavailable(f"sandbox {sandbox_id} is still STARTING")
            up = self._up.get(row.id)
            if up is not None:  # started here: woken once it is up or has ended, not polling
                await asyncio.wait([up], timeout=remaining)
                if up.done() and not up.cancelled():
                    return up.result()
            else:
                await asyncio.sleep(POLL)

    async def close(self) -> None:
        """The launch jobs stopped (a start cut short is taken over by the next process)."""
        for job in list(self._jobs.values()):
            job.cancel()
        if self._jobs:
            await asyncio.wait(list(self._jobs.values()), timeout=10)
