"""The process provider's parking (`parking.Parking`), for a warm pool (`providers.pool`):
parked process sandboxes.

A parked sandbox is made as a start makes one, for a sandbox id drawn in advance: its directory
on a disk of its own, its own uid, its network namespace, its cgroups, and its server forked
from the template into bubblewrap's namespaces. Only its keys' pipe is left empty: the server
has loaded everything and blocks reading it. Until it is claimed, its network lets it reach
this control plane alone (the policy `none`) and a file in `parked_dir` marks it.

- **Claim**: its keys written on that pipe (`hand_over`); the start then waits for its port
  on its ready pipe, as a forked start does, and lets its network in under the sandbox's own
  policy. It holds no key before that: the template forks it with none, and its environment
  is made for its sandbox id alone.
- **Never outliving its control plane**: the keys' pipe's write end is this control plane's
  alone. When it ends, however it ends, the server reads no keys and exits, its holder's
  lifeline closes and bubblewrap ends; the next control plane removes the directory, disk,
  network and cgroups of every sandbox still marked (`sweep`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path

import anyio

from control_plane.network.policy import NetworkPolicy
from control_plane.providers.parking import Parked, Parking
from control_plane.providers.process.archive import Archiver
from control_plane.providers.process.children import Children
from control_plane.providers.process.isolation import READY_FILE
from control_plane.providers.process.leader import Leader
from control_plane.providers.process.network import ProcessNetwork
from control_plane.providers.process.settings import ProcessSettings
from control_plane.providers.process.start import Starter, Waiting
from control_plane.providers.process.stop import Stopper
from control_plane.sandboxes.provider import Handle, Launch, ProviderError
from core import processes

logger = logging.getLogger(__name__)

#: A parked sandbox reaches this control plane alone until a sandbox's policy is its own.
PARKED_POLICY = NetworkPolicy(mode="none")


class ProcessParking(Parking[Handle | Waiting]):
    """Parked process sandboxes: what the process provider offers a warm pool. A cold start
    gives its wait the handle of a server already up; a claimed one, the parked server."""

    settings: ProcessSettings
    starter: Starter
    stopper: Stopper
    archiver: Archiver
    children: Children
    network: ProcessNetwork | None

    # -- a start, in three steps ------------------------------------------------------------

    async def prepare(self, launch: Launch) -> None:
        if launch.spec_id != self.spec.id:
            raise ProviderError(f"unknown sandbox spec {launch.spec_id!r}")

    async def start_cold(self, launch: Launch) -> Handle | Waiting:
        return await self.starter.create(launch)

    async def until_started(self, launch: Launch, started: Handle | Waiting) -> Handle:
        """A cold start's handle as it is; a claimed server's once it says its port and its
        network is let in under the sandbox's policy (the two at once: the rules need only
        its address). Nothing of it is left running when either fails."""
        if isinstance(started, Handle):
            return started
        try:
            if self.network is None or started.address is None:
                return await self.starter.claimed(launch, started)
            at = Handle(sandbox_id=launch.sandbox_id, ref="", port=0, host=str(started.address))
            async with asyncio.TaskGroup() as group:
                claimed = group.create_task(self.starter.claimed(launch, started))
                group.create_task(self.network.lift(at, launch.network))
            return claimed.result()
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self.children.kill_now(started.pid)
                await self.starter.unplace(launch)
            failed = exc.subgroup(ProviderError) if isinstance(exc, BaseExceptionGroup) else None
            if failed is not None:  # the start's error in its own words, not a group's
                raise failed.exceptions[0] from None
            raise

    # -- parking ------------------------------------------------------------------------------

    async def park(self, sandbox_id: str, webhook_url: str) -> Parked:
        launch = self._launch(sandbox_id, webhook_url)
        marker = self._marker(sandbox_id)
        marker.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        marker.touch(mode=0o600)
        try:
            waiting = await self.starter.park(launch)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._remove(sandbox_id, None)
            raise
        started = processes.start_time(waiting.pid)
        if started is None:
            waiting.close()
            await self._remove(sandbox_id, None)
            raise ProviderError("the parked server's sandbox ended as it was made")
        return Parked(sandbox_id, Leader(pid=waiting.pid, started=started).ref, waiting)

    async def hand_over(self, parked: Parked, keys: bytes) -> Handle | Waiting:
        waiting: Waiting = parked.hold
        if not await self.keep(parked):
            raise ProviderError("its parked server is gone")
        waiting.hand_over(keys)
        self._marker(parked.sandbox_id).unlink(missing_ok=True)
        return waiting

    async def keep(self, parked: Parked) -> bool:
        leader = Leader.of(Handle(sandbox_id=parked.sandbox_id, ref=parked.ref, port=0))
        self.children.reap(leader.pid)
        return leader.running()

    async def discard(self, parked: Parked) -> None:
        if isinstance(parked.hold, Waiting):
            parked.hold.close()  # the server reads no keys, and ends
        await self._remove(parked.sandbox_id, parked.ref or None)

    async def sweep(self) -> None:
        """Every sandbox still marked was parked by an earlier control plane of this state
        directory (this one has parked none yet: the provider sweeps as it starts, and its pool
        before its first park): its server ended with it."""
        if self.settings.parked_dir is None or not self.settings.parked_dir.is_dir():
            return
        for marker in self.settings.parked_dir.iterdir():
            if marker.name.isalnum():
                await self._remove(marker.name, None)

    # -- the parts ------------------------------------------------------------------------------

    def _launch(self, sandbox_id: str, webhook_url: str) -> Launch:
        """A parked sandbox's launch: its place and environment, no key."""
        if self.settings.sandboxes_dir is None or self.settings.parked_dir is None:
            raise ProviderError("no sandboxes directory is set: nothing can be parked")
        return Launch(
            sandbox_id=sandbox_id,
            spec_id=self.spec.id,
            root_dir=self.root_dir(sandbox_id, self.settings.sandboxes_dir),
            session_api_key="",
            webhook_url=webhook_url,
            network=PARKED_POLICY,
        )

    def _marker(self, sandbox_id: str) -> Path:
        assert self.settings.parked_dir is not None
        return self.settings.parked_dir / sandbox_id

    async def _remove(self, sandbox_id: str, ref: str | None) -> None:
        """A sandbox that never had a key: its processes, network, files and cgroups, and its
        mark last (so a removal cut short is swept again)."""
        assert self.settings.sandboxes_dir is not None
        root_dir = self.root_dir(sandbox_id, self.settings.sandboxes_dir)
        try:
            if ref:
                handle = Handle(sandbox_id=sandbox_id, ref=ref, port=0)
                if Leader.of(handle).holds_group():
                    await self.stopper.stop(handle, root_dir)
            # A park cut short, or an earlier control plane's: found by its ready file's path.
            for found in processes.with_argument(str(root_dir / READY_FILE)):
                processes.signal_group(found.pgid, signal.SIGKILL)
            if self.network is not None:
                await self.network.remove(sandbox_id)
            await asyncio.to_thread(self.archiver.remove, sandbox_id, root_dir)
        except (ProviderError, OSError) as exc:
            logger.warning("a parked sandbox %s was not wholly removed: %s", sandbox_id, exc)
            return
        with contextlib.suppress(OSError):
            self._marker(sandbox_id).unlink(missing_ok=True)
