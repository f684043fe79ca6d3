"""The Docker provider's parking (`parking.Parking`), for a warm pool (`providers.pool`):
parked containers.

A parked container is named `agent-pool-<id>` until claimed, and its stdin is this control
plane's attach (Docker closes it when the attach ends: the parked server then reads the end of
its keys' pipe and exits, so it never outlives its control plane). The claim writes the keys on
that attach, as a cold start does on a new container's, and the start then waits for the server
to say it serves on that same attach while the container is renamed to the sandbox's name and
its network let in (`DockerProvider.until_started`). Whether a parked one still runs is its
attach's to say (the stream ends with the container): neither the claim nor the pool's looks
ask Docker.

`DockerParking` is the Docker provider's base: these moves are the provider's own methods, made
of its container (`made`, the cold start's) and its calls on the engine (`run`).
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any

import anyio
import docker
import docker.errors

from control_plane.providers.containers import LABEL_PLANE, ContainerProvider
from control_plane.providers.docker import engine
from control_plane.providers.docker.attach import Attach, Booting
from control_plane.providers.docker.disks import VolumeDisks, remove_volume
from control_plane.providers.docker.settings import DockerSettings
from control_plane.providers.parking import Parked
from control_plane.sandboxes.provider import ProviderError

PREFIX = "agent-pool-"


class DockerParking(ContainerProvider):
    """Parked containers: what the Docker provider offers a warm pool."""

    settings: DockerSettings
    disks: VolumeDisks | None = None
    """Each sandbox's own filesystems (`docker.disks`), a parked one's too."""
    booting: dict[str, Booting]
    """Started containers whose wait has not begun, by id (what `until_started` is given is
    the id alone)."""

    @abc.abstractmethod
    async def made(
        self, sandbox_id: str, name: str, webhook_url: str, *, warm: bool = False
    ) -> tuple[str, Attach]:
        """A sandbox's container, created on its volume and attached (not started): its id and
        its attach; `warm`: its server waits for its keys. Nothing of it is left when it fails
        but its volume."""

    async def park(self, sandbox_id: str, webhook_url: str) -> Parked:
        container_id = ""
        try:
            container_id, attach = await self.made(
                sandbox_id, PREFIX + sandbox_id, webhook_url, warm=True
            )
            try:
                port, address = await self.run(engine.start, container_id, self.settings.network)
            except BaseException:
                attach.close()
                raise
        except BaseException:
            # Its volume and filesystems too (a failed park's id is never drawn again).
            with anyio.CancelScope(shield=True), contextlib.suppress(ProviderError):
                await self.run(self._remove, container_id or PREFIX + sandbox_id, sandbox_id)
            raise
        return Parked(sandbox_id, container_id, Booting(attach, port, address))

    async def hand_over(self, parked: Parked, keys: bytes) -> str:
        booting: Booting = parked.hold
        ended = booting.attach.ended()
        if ended is None:  # (an attach it cannot read) Docker is asked
            state = await self.run(engine.state, parked.ref)
            ended = state is None or state["Status"] != "running"
        if ended:
            raise ProviderError("its parked container has ended")
        try:
            await booting.attach.hand(keys)
        except OSError as exc:
            raise ProviderError(f"its parked container took no keys: {exc}") from None
        booting.claimed = True
        self.booting[parked.ref] = booting
        return parked.ref

    async def keep(self, parked: Parked) -> bool:
        if isinstance(parked.hold, Booting):
            ended = parked.hold.attach.ended()
            if ended is not None:
                return not ended

        def running(client: docker.DockerClient) -> bool:
            try:
                return bool(client.api.inspect_container(parked.ref)["State"]["Running"])
            except docker.errors.NotFound:
                return False

        try:
            return await self.run(running)
        except ProviderError:
            return True  # Docker away: it is looked at again later

    async def discard(self, parked: Parked) -> None:
        if isinstance(parked.hold, Booting):
            parked.hold.attach.close()
        with contextlib.suppress(ProviderError):
            await self.run(
                self._remove, parked.ref or PREFIX + parked.sandbox_id, parked.sandbox_id
            )

    async def sweep(self) -> None:
        """A live parked server belongs to a live control plane (its stdin is that one's)."""

        def sweep(client: docker.DockerClient) -> None:
            filters: dict[str, Any] = {"label": [f"{LABEL_PLANE}={self.plane}"]}
            for container in client.api.containers(all=True, filters=filters):
                name = str(container["Names"][0]).lstrip("/")
                if name.startswith(PREFIX) and container["State"] != "running":
                    self._remove(client, str(container["Id"]), name.removeprefix(PREFIX))

        await self.run(sweep)

    def _remove(self, client: docker.DockerClient, container_id: str, sandbox_id: str) -> None:
        """A container that never had a key, its volume and its filesystems."""
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(container_id, force=True, v=True)
        with contextlib.suppress(docker.errors.APIError, ProviderError):
            remove_volume(client, self.disks, sandbox_id)
