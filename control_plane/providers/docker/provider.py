"""The Docker provider: each sandbox is a container of the sandbox image (sandbox.Dockerfile).

Driven through the Docker Engine API by the Docker SDK for Python, its API version negotiated
with the daemon (an older daemon than the SDK knows is fine). The SDK blocks, so every call runs
in a worker thread (`anyio.to_thread`) and the event loop never waits on Docker.

This module is the sandbox's life, step by step, on the seam's terms; the wing's other modules
hold what those steps are made of:
- `settings`: what a provider is built from (`DockerSettings.of(config)`);
- `container`: what a sandbox's container is (its name, labels, volume, published port,
  environment, user, capabilities, read-only root and limits);
- `disks`: the volume's own filesystems, its disk limit;
- `bridge`: the sandboxes' bridge network without inter-container traffic, and this host as
  a container names it (`host.docker.internal`);
- `network`: the network boundary each container is held to by its address on that bridge;
- `engine`: the small blocking calls the steps are made of;
- `attach`: the attach each container is started with: its keys in, its server's word that it
  serves out;
- `teardown`: a sandbox's end, its workspace archived;
- `start`: a start's making and waiting, as few round trips to the engine as it can be (the
  server says on its attach when it serves; its network is let in meanwhile);
- `pool`: containers started before they are asked for (parked, for a warm pool that wraps
  the provider: `providers.pool.Pooled`).
`start` and `pool` are the provider's bases (`DockerStarts` over `DockerParking`), so starting
and parking are its own.

A sandbox's container is found again by its labels (never by its name alone), so a restarted
control plane adopts what a previous one started; the handle's ref is the container's id, which
tells it from another container of the same name (`engine.refers_to`). It is RUNNING once its
server has said it serves and `/alive` answers through the published port, its network beyond
this host let in (a start that fails is let out again). Pause and resume are Docker's pause and
unpause (the cgroup freezer: no process notices, memory is kept).
"""

from __future__ import annotations

import ipaddress
import logging
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx
from docker.models.containers import Container

from control_plane.models import DiskUsage
from control_plane.network.fence import Refusals
from control_plane.network.policy import NetworkPolicy
from control_plane.providers.containers import (
    LABEL_PLANE,
    LABEL_SANDBOX,
    STATE_DIR,
    VOLUME_DIR,
    WORKSPACE,
    explain,
    name_of,
    plane_label,
)
from control_plane.providers.docker import engine
from control_plane.providers.docker.bridge import (
    HOST_ALIAS,
    behind_boundary,
    ensure_network,
    for_container,
)
from control_plane.providers.docker.disks import volume_disks
from control_plane.providers.docker.network import DockerNetwork, address_of
from control_plane.providers.docker.settings import DockerSettings
from control_plane.providers.docker.start import DockerStarts
from control_plane.providers.docker.teardown import tear_down
from control_plane.sandboxes.provider import (
    Handle,
    Launch,
    Limits,
    Liveness,
    ProviderError,
    SandboxSpec,
)

logger = logging.getLogger(__name__)

# What callers and tests know by this module's names.
__all__ = [
    "HOST_ALIAS",
    "LABEL_PLANE",
    "LABEL_SANDBOX",
    "STATE_DIR",
    "SPEC",
    "VOLUME_DIR",
    "WORKSPACE",
    "DockerProvider",
    "DockerSettings",
    "Limits",
    "for_container",
    "name_of",
    "plane_label",
]

SPEC = SandboxSpec(
    id="docker",
    description="a container of the sandbox image (sandbox.Dockerfile) "
    "on a bridge network without inter-container traffic, as an unprivileged user "
    "with a read-only root and limits, its state and workspace in a volume of its own; "
    f"its workspace at {WORKSPACE}",
    working_dir=WORKSPACE,
)
FREEZE_TRIES = 5
"""Docker's pause asked again this many times when runc could not freeze the container."""


class DockerProvider(DockerStarts):
    """Sandboxes as containers of one Docker engine, on a bridge network of their own."""

    spec = SPEC

    def __init__(
        self,
        settings: DockerSettings,
        *,
        fence: DockerNetwork | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`fence`: the network boundary its containers are held to (`docker.network`; None:
        Docker's network alone). `transport`: how /alive is asked (a test's). It parks
        containers (`docker.pool`) for a warm pool that wraps it (`providers.pool.Pooled`,
        when the settings ask for one and name the webhook URL every sandbox gets)."""
        super().__init__(
            settings.archive_dir,
            image=settings.image,
            plane=settings.plane,
            docker_url=settings.docker_url,
            limits=settings.limits,
            start_timeout=settings.start_timeout,
            stop_grace=settings.stop_grace,
            transport=transport,
        )
        self.settings = settings
        self.fence = fence
        self.disks = volume_disks(settings.disks_dir, settings.disk_limit, settings.docker_url)
        self.booting = {}
        self._runtime_known = settings.runtime is None
        self._network_ready = False

    def inside(self, url: str) -> str:
        """`url` (this control plane's) as a sandbox's container reaches it (`docker.bridge`)."""
        return for_container(url) if self.fence is None else behind_boundary(url, self.fence.port)

    @property
    def sandbox_side(self) -> str | None:
        return None if self.fence is None else self.fence.gateway

    async def start(self) -> None:
        if self.settings.runtime is not None:
            try:
                await self._has_runtime()
            except ProviderError as exc:  # said now, and again by each start it fails
                logger.error("%s", exc)
        if self.fence is not None:
            try:
                await self._fenced()
            except ProviderError as exc:  # Docker away: the first start tries again
                logger.warning("sandboxes' network boundary not up yet: %s", exc)
        await super().start()

    async def _has_runtime(self) -> None:
        """ProviderError unless the daemon knows `runtime` (a no-op once it did)."""
        if self._runtime_known:
            return
        runtime = self.settings.runtime
        known = await self.run(lambda client: sorted(client.info().get("Runtimes") or {}))
        if runtime not in known:
            raise ProviderError(
                f"Docker has no runtime {runtime!r} (it knows {', '.join(known) or 'none'}):"
                f" register it in the daemon's daemon.json (docs/gvisor.md), or unset "
                f"CONTROL_PLANE_SANDBOX_RUNTIME"
            )
        self._runtime_known = True

    async def _fenced(self) -> None:
        """The bridge network made and its boundary up (a no-op once it is)."""
        if self.fence is not None and self.fence.boundary is None:
            await self.fence.ensure(await self.run(self._ensure_network))

    async def close(self) -> None:
        await super().close()
        if self.fence is not None:
            await self.fence.close()

    def _find(self, client: docker.DockerClient, sandbox_id: str) -> Container | None:
        """The sandbox's container, found by its labels (never by name alone)."""
        found = client.containers.list(all=True, filters=self.label_filter(sandbox_id))
        return found[0] if found else None

    def _ensure_network(self, client: docker.DockerClient) -> dict[str, Any]:
        """The sandboxes' network, made when missing (then known to be there: a start does not
        ask again, unless its container's creation finds it gone)."""
        attrs = ensure_network(client, self.settings.network)
        self._network_ready = True
        return attrs

    # -- create --------------------------------------------------------------------------------

    # (`create` is `parking.Parking`'s: these three steps in a row, a pool's claim between.)

    async def prepare(self, launch: Launch) -> None:
        """Its spec, the runtime the settings name, and the network boundary up."""
        self.check_spec(launch)
        await self._has_runtime()
        await self._fenced()

    # -- adoption, health ---------------------------------------------------------------------

    async def recover(self, launch: Launch) -> Handle | None:
        """The container of a start that was cut short, found by its labels: its handle once
        its agent server answers; otherwise it is removed and None returned."""

        def find(client: docker.DockerClient) -> tuple[str, str] | None:
            container = self._find(client, launch.sandbox_id)
            return None if container is None else (str(container.id), container.status)

        found = await self.run(find)
        if found is None:
            return None
        container_id, status = found
        if status == "paused":
            return await self.run(engine.handle_of, launch.sandbox_id, container_id)
        if status == "running":
            try:
                return await self._wait_up(launch.sandbox_id, container_id, self.start_timeout)
            except ProviderError:
                pass
        await self.run(engine.remove_container, container_id)
        return None

    async def inspect(self, handle: Handle) -> Liveness:
        def look(client: docker.DockerClient) -> str | None:
            container = self._find(client, handle.sandbox_id)
            if container is None or not engine.refers_to(handle.ref, str(container.id)):
                return None
            return container.status

        status = await self.run(look)
        if status == "paused":
            return Liveness.STOPPED
        if status == "running":
            return Liveness.ALIVE if await self.alive(handle) else Liveness.UNRESPONSIVE
        if status == "restarting":
            return Liveness.UNRESPONSIVE
        return Liveness.GONE  # none, exited, dead, being removed

    # -- pause, resume ------------------------------------------------------------------------

    async def pause(self, handle: Handle) -> None:
        """Docker's pause freezes every process of the container (the cgroup freezer) and
        returns once they are frozen."""

        def freeze(client: docker.DockerClient) -> None:
            container = self._ours(client, handle)
            for attempt in range(FREEZE_TRIES):
                if container.status == "paused":
                    return
                try:
                    container.pause()
                    return
                except docker.errors.APIError as exc:
                    # runc waits a fraction of a second for the cgroup to leave FREEZING, then
                    # thaws it and says "unable to freeze": on a busy machine, or while the
                    # container forks, asking again is what works.
                    if "unable to freeze" not in explain(exc) or attempt == FREEZE_TRIES - 1:
                        raise
                time.sleep(0.2 * (attempt + 1))
                container.reload()

        await self.run(freeze)

    async def resume(self, handle: Handle) -> Handle:
        def thaw(client: docker.DockerClient) -> None:
            container = self._ours(client, handle)
            if container.status == "paused":  # (one thawed by hand is just running)
                container.unpause()

        await self.run(thaw)
        await self.until_alive(handle, "the agent server did not answer after resuming")
        return handle

    def _ours(self, client: docker.DockerClient, handle: Handle) -> Container:
        container = self._find(client, handle.sandbox_id)
        if container is None or not engine.refers_to(handle.ref, str(container.id)):
            raise ProviderError("the sandbox's container is gone")
        return container

    # -- the network boundary -----------------------------------------------------------------

    async def set_network(self, handle: Handle, policy: NetworkPolicy) -> bool:
        if self.fence is None:
            return False
        await self._fenced()

        def find(client: docker.DockerClient) -> ipaddress.IPv4Address | None:
            container = self._ours(client, handle)
            return address_of(container.attrs, self.settings.network)

        address = await self.run(find)
        if address is None:
            raise ProviderError("the sandbox's container has no address on its network")
        await self.fence.admit(handle.sandbox_id, address, policy)
        return True

    async def refusals(self, handle: Handle) -> Refusals | None:
        return None if self.fence is None else await self.fence.refusals(handle.sandbox_id)

    # -- destroy ------------------------------------------------------------------------------

    async def destroy(self, sandbox_id: str, handle: Handle | None, root_dir: Path) -> Path | None:
        """The container stopped (SIGTERM, SIGKILL after the grace period) and removed, the
        workspace archived from its volume, the volume and its filesystems removed
        (`docker.teardown`). Works from
        labels and names alone, so a sandbox whose start was cut short (no handle) goes just as
        well. `root_dir` is a path inside the container: nothing of a sandbox is on this
        machine's disk."""
        if self.fence is not None:
            await self.fence.release(sandbox_id)

        def end(client: docker.DockerClient) -> Path | None:
            return tear_down(
                client,
                self.settings,
                sandbox_id,
                self._find(client, sandbox_id),
                labels=self.labels(sandbox_id),
                write=self.write_archive,
                disks=self.disks,
            )

        return await self.run(end)

    def disk(self, sandbox_id: str, root_dir: Path) -> DiskUsage | None:
        return None if self.disks is None else self.disks.usage(sandbox_id)
