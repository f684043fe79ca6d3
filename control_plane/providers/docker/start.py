"""A Docker sandbox's start (`parking.Parking`'s last two steps, and the container's making):
the provider's base, below its parking, as few round trips to the engine as it can be.

- **Made**: what a start cut short left replaced, the network made once (and again only when a
  creation finds it gone), the volume and its filesystems (`docker.disks`), the container
  created with the Engine API's own call (`docker.container`) and attached: stdin and stdout.
- **Started**: Docker's start, the keys written on the attach, the container looked at once
  (its published port, its address).
- **Up**: nothing is asked over and over while the server boots: it says it serves on that
  attach (`docker.attach`), and /alive is asked once, through the published port. Meanwhile
  the network boundary lets the container in (it needs only its address, and no agent works in
  the sandbox before its start is over), and a claimed parked container takes the sandbox's
  name. A start that fails is let out again as its container is removed; a claimed one that
  ended first gives way to a cold start under the same id.

Where the attach cannot be read (TLS, SSH) or said nothing, Docker and /alive are asked as they
always were (`_wait_up`, also a restarted control plane's way to adopt a starting container).
"""

from __future__ import annotations

import abc
import contextlib
import ipaddress
import logging
import time
from typing import Any

import anyio
import docker
import docker.errors
from docker.models.containers import Container

from control_plane.providers.containers import explain, name_of
from control_plane.providers.docker import engine
from control_plane.providers.docker.attach import Attach, Booting, Ended
from control_plane.providers.docker.container import create as create_container
from control_plane.providers.docker.disks import ensure_volume
from control_plane.providers.docker.network import DockerNetwork, address_of
from control_plane.providers.docker.pool import DockerParking
from control_plane.sandboxes.provider import Handle, Launch, ProviderError, until_up

logger = logging.getLogger(__name__)

#: Seconds between a starting server's /alive checks, and between looks at its container,
#: where its attach cannot say when it serves.
ALIVE_INTERVAL = 0.02
STATE_INTERVAL = 0.25


class ContainerEnded(ProviderError):
    """The container ended (or was removed) before its server answered."""


def first_of(exc: BaseException) -> BaseException:
    """The ProviderError a task group's failure holds (a start's error in its own words, not a
    group's), else the failure itself."""
    while isinstance(exc, BaseExceptionGroup):
        found = exc.subgroup(ProviderError)
        if found is None:
            return exc
        exc = found.exceptions[0]
    return exc


class DockerStarts(DockerParking):
    """How the Docker provider starts a container, cold or claimed, and waits for it."""

    fence: DockerNetwork | None
    _network_ready: bool = False

    @abc.abstractmethod
    def inside(self, url: str) -> str:
        """`url` as a sandbox's container reaches it."""

    @property
    @abc.abstractmethod
    def sandbox_side(self) -> str | None:
        """The boundary's address on the bridge (None: no boundary)."""

    @abc.abstractmethod
    def _find(self, client: docker.DockerClient, sandbox_id: str) -> Container | None:
        """The sandbox's container, found by its labels."""

    @abc.abstractmethod
    def _ensure_network(self, client: docker.DockerClient) -> dict[str, Any]:
        """The sandboxes' network, made when missing."""

    async def start_cold(self, launch: Launch) -> str:
        """A new container (one a start cut short left is replaced), started with its keys on
        its stdin."""
        container_id, attach = await self.made(
            launch.sandbox_id,
            name_of(launch.sandbox_id),
            self.inside(launch.webhook_url),
            replace=True,
        )
        try:
            port, address = await self.run(self._boot, container_id, attach, launch.keys())
        except BaseException:
            attach.close()
            with anyio.CancelScope(shield=True), contextlib.suppress(ProviderError):
                await self.run(engine.remove_container, container_id)
            raise
        self.booting[container_id] = Booting(attach, port, address)
        return container_id

    def _boot(
        self, client: docker.DockerClient, container_id: str, attach: Attach, keys: bytes
    ) -> tuple[int, ipaddress.IPv4Address | None]:
        """Started, its keys written, then looked at once: its published port and address."""
        client.api.start(container_id)
        with contextlib.suppress(OSError):  # ended already: its wait says how
            attach.give(keys)
        attrs = client.api.inspect_container(container_id)
        return engine.published(attrs), address_of(attrs, self.settings.network)

    async def until_started(self, launch: Launch, container_id: str) -> Handle:
        """Until its server says it serves and /alive answers (`_answering`); meanwhile,
        behind the boundary, its network is let in (it needs only the address; no agent works
        in it before the start is over), and a claimed one takes the sandbox's name. A claimed
        one that ends first gives way to a cold start under the same id. When it fails or is
        cancelled nothing of it is left running, nor let in."""
        booting = self.booting.pop(container_id, None)
        if booting is None:  # (not started here) Docker is asked
            return await self._until_started_asking(launch, container_id)
        sandbox_id = launch.sandbox_id
        try:
            async with anyio.create_task_group() as group:
                if booting.claimed:
                    group.start_soon(self.run, engine.rename, container_id, name_of(sandbox_id))
                if self.fence is not None:
                    if booting.address is None:
                        raise ProviderError("the container has no address on its network")
                    group.start_soon(self.fence.admit, sandbox_id, booting.address, launch.network)
                handle = await self._answering(sandbox_id, container_id, booting)
            return handle
        except BaseException as exc:
            booting.attach.close()
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(ProviderError):
                    await self.run(engine.remove_container, container_id)
                if self.fence is not None:
                    with contextlib.suppress(ProviderError):
                        await self.fence.release(sandbox_id)
            error = first_of(exc)
            if isinstance(error, ContainerEnded) and booting.claimed:
                logger.warning(
                    "sandbox %s: its parked container ended as it was claimed (%s); it starts cold",
                    sandbox_id,
                    error,
                )
                return await self.until_started(launch, await self.start_cold(launch))
            if error is exc:
                raise
            raise error from None

    async def _answering(self, sandbox_id: str, container_id: str, booting: Booting) -> Handle:
        """Its handle once its server has said it serves (on the attach) and /alive answers
        through the published port. Where the attach cannot be read, or ended or said something
        else, Docker and /alive are asked instead (`_wait_up`)."""
        handle = Handle(sandbox_id=sandbox_id, ref=container_id, port=booting.port)
        deadline = time.monotonic() + self.start_timeout
        try:
            with anyio.fail_after(self.start_timeout):
                said = await booting.attach.ready()
        except Ended:
            said = None  # its container ended, most likely: Docker says
        except TimeoutError:
            raise ProviderError(self._late) from None
        finally:
            booting.attach.close()
        if said and await self.alive(handle):
            return handle
        return await self._wait_up(
            sandbox_id, container_id, max(deadline - time.monotonic(), STATE_INTERVAL)
        )

    async def _until_started_asking(self, launch: Launch, container_id: str) -> Handle:
        """Until /alive answers (`_wait_up`); then, behind the boundary, its network let in."""
        try:
            handle = await self._wait_up(launch.sandbox_id, container_id, self.start_timeout)
            if self.fence is not None:  # until now it reached nothing beyond this host
                address = await self.run(engine.address, container_id, self.settings.network)
                if address is None:
                    raise ProviderError("the container has no address on its network")
                await self.fence.admit(launch.sandbox_id, address, launch.network)
            return handle
        except BaseException:
            with anyio.CancelScope(shield=True):  # a cancelled start leaves nothing running
                await self.run(engine.remove_container, container_id)
            raise

    async def made(
        self,
        sandbox_id: str,
        name: str,
        webhook_url: str,
        *,
        warm: bool = False,
        replace: bool = False,
    ) -> tuple[str, Attach]:
        """A sandbox's container (`docker.container`), created on its volume on the sandboxes'
        network and attached, not started; `warm`: its server loads everything first and waits
        for its keys (a parked one, `docker.pool`); `replace`: a container of the sandbox's
        left by a start cut short goes first."""
        return await self.run(self._create, sandbox_id, name, webhook_url, warm, replace)

    def _create(
        self,
        client: docker.DockerClient,
        sandbox_id: str,
        name: str,
        webhook_url: str,
        warm: bool,
        replace: bool,
    ) -> tuple[str, Attach]:
        """`made`, in one worker thread: what was left replaced, the network (once), the volume
        (on its own filesystems, `docker.disks`) when it has none, the container and its
        attach."""
        if replace:
            stale = self._find(client, sandbox_id)
            if stale is not None:  # a start cut short earlier: this one replaces it
                stale.remove(force=True)
        if not self._network_ready:
            self._ensure_network(client)
        # Behind the boundary, the control plane and the resolver are the bridge's gateway.
        gateway = self.sandbox_side
        if self.fence is not None and gateway is None:
            raise ProviderError("the sandboxes' network boundary is not up yet")
        labels = self.labels(sandbox_id)
        ensure_volume(client, self.disks, sandbox_id, labels)

        def create() -> str:
            return create_container(
                client,
                self.settings,
                sandbox_id=sandbox_id,
                name=name,
                labels=labels,
                webhook_url=webhook_url,
                gateway=gateway,
                warm=warm,
            )

        try:
            container_id = create()
        except docker.errors.NotFound as exc:  # its network removed since it was made
            if isinstance(exc, docker.errors.ImageNotFound) or "network" not in explain(exc):
                raise
            self._ensure_network(client)
            container_id = create()
        try:
            held = client.api.attach_socket(
                container_id, params={"stdin": 1, "stdout": 1, "stream": 1}
            )
        except BaseException:
            client.api.remove_container(container_id, force=True)
            raise
        return container_id, Attach(held)

    @property
    def _late(self) -> str:
        return f"the agent server did not answer /alive within {self.start_timeout:g} s"

    async def _wait_up(self, sandbox_id: str, container_id: str, timeout: float) -> Handle:
        """Until /alive answers through the published port; ContainerEnded when the container
        ends first, ProviderError when the time is up. /alive is asked every ALIVE_INTERVAL,
        Docker only every STATE_INTERVAL: an inspection costs the daemon more than a refused
        connection costs anyone, and a start is over the moment the server answers."""
        handle: Handle | None = None
        look_at = 0.0

        async def look() -> Handle | None:
            nonlocal handle, look_at
            if handle is not None and await self.alive(handle):
                return handle
            if handle is None or time.monotonic() >= look_at:
                attrs = await self.run(engine.attributes, container_id)
                state = None if attrs is None else attrs["State"]
                if state is None or state["Status"] not in ("running", "created"):
                    raise await self._ended(container_id, state)
                look_at = time.monotonic() + STATE_INTERVAL
                if handle is None and state["Status"] == "running" and attrs is not None:
                    port = engine.published(attrs)
                    handle = Handle(sandbox_id=sandbox_id, ref=container_id, port=port)
                    return handle if await self.alive(handle) else None  # asked at once
            return None

        return await until_up(look, within=timeout, interval=ALIVE_INTERVAL, late=self._late)

    async def _ended(self, container_id: str, state: dict[str, Any] | None) -> ContainerEnded:
        logs = await self.run(engine.logs, container_id)
        status = "is gone" if state is None else f"exited with status {state['ExitCode']}"
        return ContainerEnded(f"the agent server's container {status}: {logs}")
