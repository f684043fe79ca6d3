"""The Docker provider's warm pool: a few started containers that no sandbox has yet, each
handed whole to one new sandbox.

A cold Docker start waits for Docker to create and start a container (about 0.5 s) and for the
server's imports inside it (about 0.7 s of CPU). A parked container has both behind it. It is
made as a cold start makes a sandbox's (the same image, network, hardening and limits, an empty
volume of its own) for a sandbox id drawn in advance, named `agent-pool-<id>`, and its server
(`python -m agent_server.warm`) has loaded everything and waits on its stdin for its keys.

- **Reserve**: a new sandbox's row takes its id from a parked container when there is one
  (`SandboxProvider.reserve`), so the container's labels and volume are already the sandbox's.
- **Claim**: the sandbox's start renames the container to the sandbox's name and writes the
  keys on the stdin attach this control plane has held since the container started; the start
  is over when /alive answers. A container whose server has died meanwhile is removed and the
  start is a cold one under the same id.
- **One sandbox each**: a container is claimed once and never comes back; one reserved for a
  row that was never made (its transaction failed) is removed after RESERVE_TIMEOUT.
- **Never outliving its control plane**: its stdin is this control plane's attach (Docker
  closes it when the attach ends), so when the control plane is gone the parked server reads
  the end of its keys' pipe and exits; the pool of a control plane that starts removes what
  exited of its deployment's (`sweep`). What a parked container holds: the image and an empty
  volume, no key, so nothing of a user is in the pool.
- **Refilled in the background**, one container at a time. A container that cannot be parked
  is logged and tried again after BACKOFF; a start never waits for the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import docker
import docker.errors
from docker.models.containers import Container

from control_plane.sandboxes.containers import LABEL_PLANE, close_attach, hand_over, name_of
from control_plane.sandboxes.provider import Launch, ProviderError

T = TypeVar("T")

logger = logging.getLogger(__name__)

PREFIX = "agent-pool-"
#: Seconds a reserved container waits for its sandbox's start before it is removed.
RESERVE_TIMEOUT = 120.0
#: Seconds before parking is tried again after a failure (Docker away, the image missing).
BACKOFF = 10.0


class Maker(Protocol):
    """What the pool asks of its provider (the Docker provider)."""

    plane: str

    async def run(self, fn: Callable[..., T], *args: Any) -> T: ...

    def make_container(self, client: docker.DockerClient, sandbox_id: str, name: str,
                       webhook_url: str, *, warm: bool = False) -> Container: ...


def pool_name(sandbox_id: str) -> str:
    return PREFIX + sandbox_id


@dataclass
class Parked:
    sandbox_id: str
    container_id: str
    attached: Any
    """The held stdin attach: the keys go there; closing it ends the parked server."""
    reserved_at: float | None = None


@dataclass
class WarmPool:
    provider: Maker
    size: int
    webhook_url: str
    """As a container sees it: the same for every sandbox of this control plane."""
    _parked: deque[Parked] = field(default_factory=deque)
    _reserved: dict[str, Parked] = field(default_factory=dict)
    _wanted: asyncio.Event = field(default_factory=asyncio.Event)
    _filler: asyncio.Task[None] | None = None

    # -- what the provider asks -------------------------------------------------------------

    def start(self) -> None:
        self._filler = asyncio.create_task(self._fill(), name="warm pool")

    @property
    def waiting(self) -> list[str]:
        """The sandbox ids of the parked containers, first to be handed out first."""
        return [parked.sandbox_id for parked in self._parked]

    def reserve(self) -> str | None:
        """A parked container's sandbox id, taken out of the pool (None when it is empty)."""
        if not self._parked:
            return None
        parked = self._parked.popleft()
        parked.reserved_at = time.monotonic()
        self._reserved[parked.sandbox_id] = parked
        self._wanted.set()
        return parked.sandbox_id

    async def claim(self, launch: Launch, webhook_url: str) -> str | None:
        """The reserved container of `launch`'s sandbox with its keys handed over (its id),
        or None: not one of the pool's, or its server is gone (then removed)."""
        parked = self._reserved.pop(launch.sandbox_id, None)
        if parked is None:
            return None
        if webhook_url != self.webhook_url:
            await self._discard(parked)
            return None
        try:
            return await self.provider.run(self._hand_over, parked, launch.keys())
        except ProviderError as exc:
            logger.warning("warm pool: sandbox %s starts cold (%s)", launch.sandbox_id, exc)
            await self._discard(parked)
            return None

    async def close(self) -> None:
        """Parked and reserved containers removed; claimed ones are sandboxes and stay."""
        if self._filler is not None:
            self._filler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._filler
        left = [*self._parked, *self._reserved.values()]
        self._parked.clear()
        self._reserved.clear()
        for parked in left:
            await self._discard(parked)

    # -- in the background ------------------------------------------------------------------

    async def _fill(self) -> None:
        try:
            await self.provider.run(self._sweep)
        except ProviderError as exc:
            logger.warning("warm pool: what earlier control planes parked is left (%s)", exc)
        while True:
            self._expire()
            if len(self._parked) < self.size:
                try:
                    self._parked.append(await self.provider.run(self._park))
                    continue
                except ProviderError as exc:
                    logger.warning("warm pool: a container could not be parked (%s); again "
                                   "in %g s", exc, BACKOFF)
                    await asyncio.sleep(BACKOFF)
                    continue
            self._wanted.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wanted.wait(), RESERVE_TIMEOUT / 4)

    def _expire(self) -> None:
        now = time.monotonic()
        for sandbox_id, parked in list(self._reserved.items()):
            if parked.reserved_at is not None and now - parked.reserved_at > RESERVE_TIMEOUT:
                del self._reserved[sandbox_id]
                asyncio.create_task(self._discard(parked), name=f"unclaimed {sandbox_id}")

    async def _discard(self, parked: Parked) -> None:
        close_attach(parked.attached)
        with contextlib.suppress(ProviderError):
            await self.provider.run(_remove, parked.container_id, name_of(parked.sandbox_id))

    # -- blocking (through DockerProvider.run) ----------------------------------------------

    def _park(self, client: docker.DockerClient) -> Parked:
        sandbox_id = uuid.uuid4().hex
        container = self.provider.make_container(client, sandbox_id, pool_name(sandbox_id),
                                                 self.webhook_url, warm=True)
        try:
            attached = client.api.attach_socket(str(container.id),
                                                params={"stdin": 1, "stream": 1})
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

    def _hand_over(self, client: docker.DockerClient, parked: Parked, keys: bytes) -> str:
        state = client.api.inspect_container(parked.container_id)["State"]
        if state["Status"] != "running":
            raise ProviderError(f"its parked container is {state['Status']}")
        client.api.rename(parked.container_id, name_of(parked.sandbox_id))
        try:
            hand_over(parked.attached, keys)
        finally:
            close_attach(parked.attached)
        return parked.container_id

    def _sweep(self, client: docker.DockerClient) -> None:
        """What an earlier control plane of this deployment left parked and has ended (a live
        parked server belongs to a live control plane: its stdin is that one's)."""
        filters: dict[str, Any] = {"label": [f"{LABEL_PLANE}={self.provider.plane}"]}
        for container in client.containers.list(all=True, filters=filters):
            name = container.name or ""
            if name.startswith(PREFIX) and container.status != "running":
                sandbox_id = name.removeprefix(PREFIX)
                _remove(client, str(container.id), name_of(sandbox_id))


def _remove(client: docker.DockerClient, container_id: str, volume: str) -> None:
    """A container that never had a key, and its volume."""
    with contextlib.suppress(docker.errors.NotFound):
        client.api.remove_container(container_id, force=True, v=True)
    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        client.volumes.get(volume).remove(force=True)
