"""Drift: what the reconciler (`lifecycle`) finds when it looks at a sandbox's provider.

What is still there is adopted; a sandbox whose process vanished is MISSING, one failing its
health check for `health_grace` seconds is ERROR (both read-only from then on, SPEC 3.1; their
process and files are cleaned up, the transcript stays in the store); a start whose launcher
died is taken over; a pause whose control plane died half-way is finished. Every look that may
act is taken under the sandbox's guard (`SandboxService.guard`), without waiting for it: a
sandbox another process acts on right now is looked at next round. The routine look, at a
RUNNING sandbox that answers as its record says, acts on nothing and takes no guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from control_plane.models import SandboxReason, SandboxRow, SandboxStatus
from control_plane.sandboxes.provider import Handle, Liveness
from control_plane.sandboxes.service import SandboxService
from control_plane.sandboxes.starts import handle_of
from control_plane.store import sandboxes as rows
from web.errors import Conflict

logger = logging.getLogger(__name__)


def hibernated(row: SandboxRow) -> bool:
    """PAUSED with no process: its files wait for a resume (`claim_round` says the same)."""
    return row.status is SandboxStatus.PAUSED and handle_of(row) is None


class Drift:
    def __init__(self, sandboxes: SandboxService, *, health_grace: float = 30.0) -> None:
        self.sandboxes = sandboxes
        self.db = sandboxes.db
        self.provider = sandboxes.provider
        self.health_grace = health_grace

    async def adopt(self, concurrency: int = 1) -> None:
        """After a (re)start: one look at every live sandbox (see `reconcile`), `concurrency`
        at once, before this control plane answers. Hibernated ones are left out: nothing of
        them runs, and a resume starts them from their files (3,425 of them had made a
        restart 27 s long)."""
        gate = asyncio.Semaphore(concurrency)

        async def one(sandbox_id: str) -> None:
            async with gate:
                await self.reconcile(sandbox_id, adopting=True)

        found = await rows.live(self.db)
        awake = [row.id for row in found if not hibernated(row)]
        await asyncio.gather(*(one(sandbox_id) for sandbox_id in awake))

    async def reconcile(
        self, sandbox_id: str, *, adopting: bool = False, row: SandboxRow | None = None
    ) -> None:
        """One look at one sandbox: adopt it, start it again, or record that it drifted.

        `row`: the sandbox as the caller just read it. When it is RUNNING with nothing left to
        finish and its agent server answers, the look ends there (`_steady`), without the
        guard: it changes nothing, so it takes no lease. One this process acts on right now is
        left to the next round, as the guard would leave it (a server being frozen here would
        keep its health check waiting for an answer).

        `adopting`: the first look after this control plane started, when a RUNNING sandbox
        found frozen is one whose pause was cut short (PAUSED), not a hung one (a pause under
        way is recorded in the row, `pausing_reason`, so any control plane finishes it; this
        covers rows from before that record).

        An ERROR or MISSING sandbox is not looked at here; its remains are removed by
        `SandboxService.clean_up`."""
        if row is not None and not adopting and await self._steady(row):
            return
        relaunch: SandboxRow | None = None
        async with self.sandboxes.guard(sandbox_id, wait=False) as mine:
            if not mine:
                return  # another process acts on it right now
            row = await rows.get(self.db, sandbox_id)  # the guard's read: what others did
            if row is None or row.status.terminal:
                return
            if hibernated(row):
                return  # nothing of it runs, its files wait for its resume
            handle = handle_of(row)
            if handle is None:
                if row.status is SandboxStatus.STARTING and self.sandboxes.starts.starting(row.id):
                    return
                handle = await self.provider.recover(self.sandboxes.launch_of(row))
                if handle is None:
                    if row.status is SandboxStatus.STARTING:
                        relaunch = row  # its launcher died before the sandbox came up
                    else:
                        await self.sandboxes.lose(
                            row,
                            SandboxStatus.MISSING,
                            SandboxReason.VANISHED,
                            "the sandbox vanished: its conversations are read-only",
                        )
                else:
                    await rows.set_fields(self.db, row.id, **handle.stored())
            if handle is not None:
                await self._check(row, handle, adopting)
        if relaunch is not None:
            logger.info("starting sandbox %s again (its start was cut short)", relaunch.id)
            self.sandboxes.starts.launch(relaunch)

    async def _steady(self, row: SandboxRow) -> bool:
        """RUNNING as recorded, no pause half-done, not failing, and its agent server answers:
        the look most rounds take, nothing to record. Taken without the guard, whose lease is
        two writes (with 100 idle sandboxes, a control plane asked nothing was busy 16-23% of a
        core with them, 6-8% without); anything else is looked at again under it."""
        handle = handle_of(row)
        if (
            handle is None
            or self.sandboxes.acting_on(row.id)
            or row.status is not SandboxStatus.RUNNING
            or row.pausing_reason is not None
            or row.unhealthy_since is not None
        ):
            return False
        return (await self.provider.health(handle)).liveness is Liveness.ALIVE

    async def _check(self, row: SandboxRow, handle: Handle, adopting: bool) -> None:
        enter = self.sandboxes.enter
        health = await self.provider.health(handle)
        liveness = health.liveness
        if liveness is Liveness.GONE:
            gone = health.detail or "the sandbox's process is gone"
            await self.sandboxes.lose(
                row,
                SandboxStatus.MISSING,
                SandboxReason.VANISHED,
                f"{gone}: its conversations are read-only",
            )
            return
        if (
            row.status is SandboxStatus.RUNNING
            and row.pausing_reason is not None
            and liveness in (Liveness.STOPPED, Liveness.ALIVE)
        ):
            # A pause whose control plane died half-way: frozen already (only PAUSED was not
            # stored yet) or not; either way it is finished here, with its reason.
            logger.info(
                "finishing the pause of sandbox %s (its control plane stopped half-way)", row.id
            )
            if liveness is Liveness.STOPPED:
                await enter(row.id, SandboxStatus.PAUSED, row.pausing_reason, row.pausing_detail)
            else:
                with contextlib.suppress(Conflict):  # cannot be frozen: ERROR, stored
                    await self.sandboxes.freeze(row, handle, row.pausing_reason, row.pausing_detail)
            return
        if liveness is Liveness.STOPPED and row.status is not SandboxStatus.RUNNING:
            return  # paused, as it should be
        if liveness is Liveness.STOPPED and adopting:
            await enter(row.id, SandboxStatus.PAUSED, None)  # a pause cut short
            return
        if liveness is Liveness.ALIVE:
            if row.status is not SandboxStatus.RUNNING:  # came up, or thawed: the record follows
                await enter(row.id, SandboxStatus.RUNNING, None)
            elif row.unhealthy_since is not None:
                await rows.set_fields(self.db, row.id, unhealthy_since=None)
            return
        # Not answering (or frozen by someone else): ERROR once that has lasted the grace.
        moment = self.db.now()
        since = row.unhealthy_since
        if since is None:
            since = moment
            await rows.set_fields(self.db, row.id, unhealthy_since=moment)
        if (moment - since).total_seconds() >= self.health_grace:
            why = f" ({health.detail})" if health.detail else ""
            await self.sandboxes.lose(
                row,
                SandboxStatus.ERROR,
                SandboxReason.UNHEALTHY,
                f"the agent server failed its health check for "
                f"{self.health_grace:g} s{why}: its conversations are "
                "read-only",
            )
