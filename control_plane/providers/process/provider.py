"""The process provider: each sandbox is an `agent-server` child in its own process group.

The child listens on a loopback port the OS picks and reports it in a ready file
(`--ready-file`; one forked from the template also on a pipe, its launch environment's
`ready_fd`, which the start waits on instead of polling: `launch.ready`); it has its own state
and working directory, its own session key (handed over a pipe, never in its environment:
`agent_server.secrecy`) and the control plane's webhook address. Where bubblewrap works, it runs
isolated (`isolation`): the process started here, whose pid the sandbox's ref holds (`leader`),
is then bubblewrap's, leading the group the agent server is in. Pause and resume are SIGSTOP
and SIGCONT of the group; destroy is SIGTERM, SIGKILL after a grace period, then the workspace
archived and the directory removed. Children are started in a new session so they outlive a
control plane that is killed: the next one adopts them from the stored ref (the pid and its
start time), or finds a start cut short by its ready file's path on their command line.

This module is the seam's side of the kind: what the control plane calls, each call handed to
the part of the wing that does it. The start is `start` (with `environment`, what the server
is launched with, and `children`, the launchers this process spawned and reaps), or a parked
sandbox claimed (`parking`: the provider is its base, as Docker's is `docker.pool`); pause and
resume are `signals`; the end is `stop` (the processes) and `archive` (the files); a sandbox's
network namespace is `network`; what the configuration says is `settings`; the handle's ref,
the launcher's pid and start time, is `leader`.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx

from control_plane.models import DiskUsage
from control_plane.network.boundary import Boundary
from control_plane.network.fence import Refusals
from control_plane.network.policy import NetworkPolicy
from control_plane.providers.disks import DiskError, Disks
from control_plane.providers.process import cgroups
from control_plane.providers.process.archive import Archiver
from control_plane.providers.process.children import Children
from control_plane.providers.process.isolation import READY_FILE, Isolation
from control_plane.providers.process.leader import Leader
from control_plane.providers.process.network import ProcessNetwork
from control_plane.providers.process.parking import ProcessParking
from control_plane.providers.process.settings import ProcessSettings
from control_plane.providers.process.signals import Signals
from control_plane.providers.process.start import Starter
from control_plane.providers.process.stop import Stopper
from control_plane.providers.process.template import Template
from control_plane.sandboxes.provider import (
    PROJECT_DIR,
    Handle,
    Launch,
    Liveness,
    ProviderError,
    SandboxSpec,
)
from core import processes
from launch.ready import Ready

SPEC = SandboxSpec(
    id="process",
    description="an agent-server child process on this machine, "
    "in its own process group, sharing the host's tools (bash, git, Chromium)",
)


def isolated_spec(isolation: Isolation) -> SandboxSpec:
    return SandboxSpec(
        id=SPEC.id,
        description=f"{SPEC.description}; {isolation.described}: "
        "its own files, "
        f"/tmp and processes, the system read-only; its workspace at {PROJECT_DIR}",
        working_dir=PROJECT_DIR,
    )


class ProcessProvider(ProcessParking):
    host_loopback = True  # its sandboxes are this machine's processes
    hibernates = True  # a start on the same directory picks its files up

    def __init__(
        self,
        settings: ProcessSettings,
        *,
        isolation: Isolation | None = None,
        template: Template | None = None,
        groups: cgroups.Cgroups | None = None,
        network: Boundary | None = None,
        disks: Disks | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`settings`: what the configuration says (`ProcessSettings.of`). `isolation`:
        bubblewrap's (`isolation.choose`), or None: sandboxes run as this process's user, and
        serve one user only unless `settings.shared_host` accepts that. `template`: servers
        of isolated sandboxes are forked from it once it is ready. `groups`: where each
        sandbox gets a cgroup holding it to `settings.limits` (`cgroups.find`; None: no
        limits). `network`: isolated sandboxes each get a network namespace behind it (None:
        they share this host's network). `disks`: isolated sandboxes each get a filesystem of
        their own (None: they share this host's disk)."""
        super().__init__(start_timeout=settings.start_timeout, transport=transport)
        self.settings = settings
        self.isolation = isolation
        self.template = template
        self.network = (
            ProcessNetwork(network) if network is not None and isolation is not None else None
        )
        self.disks = disks if isolation is not None else None
        self.groups = groups
        self.single_tenant = isolation is None and not settings.shared_host
        #: Launchers started by this process (`spawn`), reaped so they never linger as zombies.
        self.children = Children()
        self.signals = Signals(isolation)
        self.starter = Starter(
            settings,
            self.children,
            self.alive,
            isolation=isolation,
            template=template,
            groups=groups,
            network=self.network,
            disks=self.disks,
        )
        self.stopper = Stopper(isolation, self.signals, self.children, settings.stop_grace)
        self.archiver = Archiver(
            settings.archive_dir, isolation=isolation, groups=groups, disks=self.disks
        )

        self.spec = isolated_spec(isolation) if isolation else SPEC

    def specs(self) -> list[SandboxSpec]:
        return [self.spec]

    async def start(self) -> None:
        if self.network is not None:
            await self.network.start()
        if self.template is not None:
            self.template.start()
        await self.sweep()  # what an earlier control plane parked, with or without a pool now

    async def close(self) -> None:
        if self.template is not None:
            self.template.close()
        if self.network is not None:
            await self.network.close()
        await super().close()

    def inside(self, url: str) -> str:
        """Behind the boundary, this control plane is its gateway address on the segment, at
        its own port, whatever address it is known by elsewhere."""
        return url if self.network is None else self.network.inside(url)

    @property
    def sandbox_side(self) -> str | None:
        return None if self.network is None else self.network.gateway

    def working_dir(self, root_dir: Path) -> Path:
        """Isolated: /workspace/project (bubblewrap binds the workspace there too); otherwise
        the workspace's own path on this machine."""
        return Path(PROJECT_DIR) if self.isolation is not None else root_dir / "workspace"

    async def recover(self, launch: Launch) -> Handle | None:
        """The child of a start that was cut short: its handle once it is up; a child still
        booting (no ready file yet) is killed, so the caller can start the sandbox again."""
        marker = (
            self.isolation.marker(launch.root_dir)
            if self.isolation is not None
            else str(launch.root_dir / READY_FILE)
        )
        found = processes.with_argument(marker)
        leaders = [p.pid for p in found if p.pid == p.pgid]
        try:
            port = Ready.read(launch.root_dir / READY_FILE).port
        except (OSError, ValueError):
            port = 0
        started = processes.start_time(leaders[0]) if port and len(leaders) == 1 else None
        host: str | None = Handle.host
        if self.network is not None:
            host = await self.network.host_of(launch.sandbox_id)
        if started is not None and host is not None:
            return Handle(
                sandbox_id=launch.sandbox_id,
                ref=Leader(pid=leaders[0], started=started).ref,
                port=port,
                host=host,
            )
        for group in {p.pgid for p in found}:
            processes.signal_group(group, signal.SIGKILL)
        if self.network is not None:
            await self.network.detach(launch.sandbox_id)
        return None

    async def inspect(self, handle: Handle) -> Liveness:
        leader = Leader.of(handle)
        self.children.reap(leader.pid)
        if not leader.running():
            return Liveness.GONE
        if processes.state(leader.pid) == "T":
            return Liveness.STOPPED
        return Liveness.ALIVE if await self.alive(handle) else Liveness.UNRESPONSIVE

    async def pause(self, handle: Handle) -> None:
        """Returns once the server is stopped (`Signals.pause`)."""
        await self.signals.pause(handle)

    async def resume(self, handle: Handle) -> Handle:
        await self.signals.resume(handle)
        await self.until_alive(
            handle,
            "the agent server did not answer after resuming",
            Leader.of(handle).running,
        )
        return handle

    async def hibernate(self, handle: Handle, root_dir: Path) -> None:
        """Its processes ended as a destroy ends them, its network and cgroups taken back,
        its disk unmounted (no loop device, no mount held); its files kept for the next
        `create`, which mounts them again."""
        if Leader.of(handle).holds_group():
            await self.stopper.stop(handle, root_dir)
        if self.network is not None:
            await self.network.remove(handle.sandbox_id)
        if self.groups is not None:
            await asyncio.to_thread(self.groups.remove, handle.sandbox_id)
        if self.disks is not None:
            try:
                await asyncio.to_thread(self.disks.unmount, handle.sandbox_id, root_dir)
            except DiskError as exc:
                raise ProviderError(f"the sandbox's disk could not be unmounted: {exc}") from None

    async def destroy(self, sandbox_id: str, handle: Handle | None, root_dir: Path) -> Path | None:
        if handle is not None and Leader.of(handle).holds_group():
            await self.stopper.stop(handle, root_dir)
        if self.network is not None:
            await self.network.remove(sandbox_id)
        return await asyncio.to_thread(self.archiver.archive_and_remove, sandbox_id, root_dir)

    async def set_network(self, handle: Handle, policy: NetworkPolicy) -> bool:
        return False if self.network is None else await self.network.admit(handle, policy)

    async def refusals(self, handle: Handle) -> Refusals | None:
        return None if self.network is None else await self.network.refusals(handle)

    def disk(self, sandbox_id: str, root_dir: Path) -> DiskUsage | None:
        return None if self.disks is None else self.disks.usage(root_dir)
