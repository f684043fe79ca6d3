"""The Docker provider's parking (`parking.Parking`), for a warm pool (`providers.pool`):
parked containers.

A parked container is named `agent-pool-<id>` until claimed, and its stdin is this control
plane's attach (Docker closes it when the attach ends: the parked server then reads the end of
its keys' pipe and exits, so it never outlives its control plane). The claim renames it to the
sandbox's name and writes the keys on that attach, as a cold start does on a new container's.

`DockerParking` is the Docker provider's base: these moves are the provider's own methods, made
of its container (`make_container`, the cold start's) and its calls on the engine (`run`).
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from control_plane.providers.containers import (
    LABEL_PLANE,
    ContainerProvider,
    close_attach,
    hand_over,
    name_of,
)
from control_plane.providers.docker.disks import VolumeDisks, remove_volume
from control_plane.providers.parking import Parked
from control_plane.sandboxes.provider import ProviderError

PREFIX = "agent-pool-"


class DockerParking(ContainerProvider):
    """Parked containers: what the Docker provider offers a warm pool."""

    disks: VolumeDisks | None = None
    """Each sandbox's own filesystems (`docker.disks`), a parked one's too."""

    @abc.abstractmethod
    def make_container(
        self,
        client: docker.DockerClient,
        sandbox_id: str,
        name: str,
        webhook_url: str,
        *,
        warm: bool = False,
    ) -> Container:
        """A sandbox's container, created (not started); `warm`: its server waits for its keys."""

    async def park(self, sandbox_id: str, webhook_url: str) -> Parked:
        return await self.run(self._park, sandbox_id, webhook_url)

    def _park(self, client: docker.DockerClient, sandbox_id: str, webhook_url: str) -> Parked:
        container = self.make_container(
            client, sandbox_id, PREFIX + sandbox_id, webhook_url, warm=True
        )
        try:
            attached = client.api.attach_socket(str(container.id), params={"stdin": 1, "stream": 1})
        except BaseException:
            self._remove(client, str(container.id), sandbox_id)
            raise
        try:
            container.start()
        except BaseException:
            close_attach(attached)
            self._remove(client, str(container.id), sandbox_id)
            raise
        return Parked(sandbox_id, str(container.id), attached)

    async def hand_over(self, parked: Parked, keys: bytes) -> str:
        def give(client: docker.DockerClient) -> str:
            state = client.api.inspect_container(parked.ref)["State"]
            if state["Status"] != "running":
                raise ProviderError(f"its parked container is {state['Status']}")
            client.api.rename(parked.ref, name_of(parked.sandbox_id))
            try:
                hand_over(parked.hold, keys)
            finally:
                close_attach(parked.hold)
            return parked.ref

        return await self.run(give)

    async def keep(self, parked: Parked) -> bool:
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
        if parked.hold is not None:
            close_attach(parked.hold)
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
