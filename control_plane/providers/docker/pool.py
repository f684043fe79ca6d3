"""The Docker provider's warm pool (`pool.WarmPool`): parked containers.

A parked container is named `agent-pool-<id>` until claimed, and its stdin is this control
plane's attach (Docker closes it when the attach ends: the parked server then reads the end of
its keys' pipe and exits, so it never outlives its control plane). The claim renames it to the
sandbox's name and writes the keys on that attach, as a cold start does on a new container's.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import docker
import docker.errors
from docker.models.containers import Container

from control_plane.providers.containers import LABEL_PLANE, close_attach, hand_over, name_of
from control_plane.providers.pool import Engine, Parked, WarmPool
from control_plane.sandboxes.provider import ProviderError

PREFIX = "agent-pool-"


class Maker(Engine, Protocol):
    def make_container(
        self,
        client: docker.DockerClient,
        sandbox_id: str,
        name: str,
        webhook_url: str,
        *,
        warm: bool = False,
    ) -> Container: ...


class DockerPool(WarmPool):
    provider: Maker

    async def _park(self, sandbox_id: str) -> Parked:
        return await self.provider.run(self._start, sandbox_id)

    def _start(self, client: docker.DockerClient, sandbox_id: str) -> Parked:
        container = self.provider.make_container(
            client, sandbox_id, PREFIX + sandbox_id, self.webhook_url, warm=True
        )
        try:
            attached = client.api.attach_socket(str(container.id), params={"stdin": 1, "stream": 1})
        except BaseException:
            _remove(client, str(container.id), name_of(sandbox_id))
            raise
        try:
            container.start()
        except BaseException:
            close_attach(attached)
            _remove(client, str(container.id), name_of(sandbox_id))
            raise
        return Parked(sandbox_id, str(container.id), attached)

    async def _hand_over(self, parked: Parked, keys: bytes) -> str:
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

        return await self.provider.run(give)

    async def _keep(self, parked: Parked) -> bool:
        def running(client: docker.DockerClient) -> bool:
            try:
                return bool(client.api.inspect_container(parked.ref)["State"]["Running"])
            except docker.errors.NotFound:
                return False

        try:
            return await self.provider.run(running)
        except ProviderError:
            return True  # Docker away: it is looked at again later

    async def _discard(self, parked: Parked) -> None:
        if parked.hold is not None:
            close_attach(parked.hold)
        with contextlib.suppress(ProviderError):
            await self.provider.run(
                _remove, parked.ref or PREFIX + parked.sandbox_id, name_of(parked.sandbox_id)
            )

    async def _sweep(self) -> None:
        """A live parked server belongs to a live control plane (its stdin is that one's)."""

        def sweep(client: docker.DockerClient) -> None:
            filters: dict[str, Any] = {"label": [f"{LABEL_PLANE}={self.provider.plane}"]}
            for container in client.api.containers(all=True, filters=filters):
                name = str(container["Names"][0]).lstrip("/")
                if name.startswith(PREFIX) and container["State"] != "running":
                    _remove(client, str(container["Id"]), name_of(name.removeprefix(PREFIX)))

        await self.provider.run(sweep)


def _remove(client: docker.DockerClient, container_id: str, volume: str) -> None:
    """A container that never had a key, and its volume."""
    with contextlib.suppress(docker.errors.NotFound):
        client.api.remove_container(container_id, force=True, v=True)
    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        client.volumes.get(volume).remove(force=True)
