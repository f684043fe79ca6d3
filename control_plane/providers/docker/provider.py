"""The Docker provider: each sandbox is a container of the sandbox image (sandbox.Dockerfile).

Driven through the Docker Engine API by the Docker SDK for Python, its API version negotiated
with the daemon (an older daemon than the SDK knows is fine). The SDK blocks, so every call runs
in a worker thread (`anyio.to_thread`) and the event loop never waits on Docker.

A sandbox's container:
- is named `agent-sandbox-<sandbox id>` and labelled with the sandbox's id and the control
  plane's deployment (a digest of its database URL: every control plane of one deployment
  shares it), which is how a restarted control plane finds it again;
- keeps its agent-server state and its workspace in a named volume of its own (same name),
  mounted at `/workspace`: the workspace is `/workspace/project` (where OpenHands clients
  expect it), the agent server's state `/workspace/.agent-server` beside it; a container removed by
  hand loses nothing the next start needs, and a deleted sandbox leaves a tar.gz of its workspace
  under the archive directory, served by no route;
- publishes the agent server's port 8000 on 127.0.0.1 only, on a host port Docker chooses;
- gets the webhook URL in its environment, and nothing of the control plane's own (no
  CONTROL_PLANE_* variable, no host environment at all); its session key comes on its stdin
  (attached once, then closed: `agent_server.secrecy`), so no process of the container reads
  it from tini's environment;
- runs on a bridge network of the provider's own with inter-container traffic off: sandboxes
  cannot reach each other's agent servers, nor the host's loopback services (a database, the
  published ports). The control plane is reached as `host.docker.internal`, which each
  container maps to the host's bridge gateway (`host-gateway`); a webhook URL on a loopback or
  wildcard address is rewritten to that name, so the control plane must listen where the
  bridge reaches it (0.0.0.0 or the docker0 address; `Config` refuses a loopback-only listener
  without a public URL);
- runs as the image's unprivileged user (uid 1000, whatever the image says) with every
  capability dropped, no-new-privileges, a read-only root file system (writes go to the volume
  and to tmpfs /tmp and home), and limits on memory, CPU and processes; no host path and no
  Docker socket is mounted;
- has the image's HEALTHCHECK off (the control plane asks /alive itself);
- is RUNNING only once `/alive` answers through the published port. Pause and resume are
  Docker's pause and unpause (the cgroup freezer: no process notices, memory is kept).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import docker
import docker.errors
import httpx
from docker.models.containers import Container

from control_plane.network.fence import Refusals
from control_plane.network.host import NetworkError
from control_plane.network.policy import NetworkPolicy
from control_plane.providers.containers import (
    HOME,
    LABEL_PLANE,
    LABEL_SANDBOX,
    LOG_TAIL,
    PORT_NUMBER,
    STATE_DIR,
    UID,
    USER,
    VOLUME_DIR,
    WORKSPACE,
    ContainerProvider,
    close_attach,
    environment,
    explain,
    hand_over,
    name_of,
    plane_label,
)
from control_plane.providers.docker.network import DockerNetwork, address_of
from control_plane.providers.docker.pool import DockerPool
from control_plane.sandboxes.provider import (
    DEFAULT_LIMITS,
    Handle,
    Launch,
    Limits,
    Liveness,
    ProviderError,
    SandboxSpec,
    until_up,
)

logger = logging.getLogger(__name__)

# What callers and tests know by this module's names.
__all__ = [
    "HOST_ALIAS",
    "LABEL_PLANE",
    "LABEL_SANDBOX",
    "STATE_DIR",
    "SPEC",
    "DockerProvider",
    "Limits",
    "for_container",
    "id_key",
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
PORT = f"{PORT_NUMBER}/tcp"
HOST_ALIAS = "host.docker.internal"


def tmpfs(limits: Limits) -> dict[str, str]:
    """Writable places of the read-only root (the state volume aside), bounded in size by the
    sandbox's memory, which their pages are (`Limits.tmp`)."""
    return {
        "/tmp": f"rw,nosuid,nodev,size={limits.tmp},mode=1777",
        HOME: f"rw,nosuid,nodev,size={limits.home},uid={UID},gid={UID},mode=0700",
    }


ICC = "com.docker.network.bridge.enable_icc"
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0", "::", ""}
#: Seconds a container being removed by someone else is waited for (its volume is in use).
REMOVAL_TIMEOUT = 30.0
#: The image's HEALTHCHECK is for `docker run` by hand: here the control plane asks /alive
#: itself, and Docker's check would start a Python in every sandbox every 10 s (65 ms of CPU
#: each: a third of a core for 50 idle sandboxes, taken from the ones starting).
NO_HEALTHCHECK = {"test": ["NONE"]}
#: Seconds between a starting server's /alive checks, and between looks at its container.
ALIVE_INTERVAL = 0.02
STATE_INTERVAL = 0.25
#: A warm pool's parked server (its host and port are the image's variables, as for the
#: image's own entrypoint).
WARM_ENTRYPOINT = ["tini", "--", "python", "-m", "agent_server.warm"]


def id_key(container_id: str) -> int:
    """60 bits of the container id: stored as the handle's pid_start_time (a signed BIGINT), it
    tells our container from another of the same name."""
    return int(container_id[:15], 16)


def for_container(url: str) -> str:
    """`url` as a container sees it: a loopback or wildcard host is the Docker host, reached
    through the bridge gateway under HOST_ALIAS."""
    parts = urlsplit(url)
    if (parts.hostname or "") not in _LOCAL_HOSTS:
        return url
    netloc = HOST_ALIAS + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


FREEZE_TRIES = 5
"""Docker's pause asked again this many times when runc could not freeze the container."""


class DockerProvider(ContainerProvider):
    spec = SPEC

    def __init__(
        self,
        archive_dir: Path,
        *,
        image: str,
        plane: str,
        docker_url: str = "unix:///var/run/docker.sock",
        network: str = "agent-sandboxes",
        limits: Limits = DEFAULT_LIMITS,
        start_timeout: float = 60.0,
        stop_grace: float = 5.0,
        warm_pool: int = 0,
        webhook_url: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        fence: DockerNetwork | None = None,
        runtime: str | None = None,
    ) -> None:
        """`warm_pool`: containers kept started for new sandboxes (`docker.pool`), given the
        `webhook_url` every sandbox of this control plane gets. `fence`: the network
        boundary its containers are held to (`docker.network`; None: Docker's network alone).
        `runtime`: the daemon's OCI runtime for its containers (runsc: gVisor), or its
        default."""
        super().__init__(
            archive_dir,
            image=image,
            plane=plane,
            docker_url=docker_url,
            limits=limits,
            start_timeout=start_timeout,
            stop_grace=stop_grace,
            transport=transport,
        )
        self.network = network
        self.fence = fence
        self.runtime = runtime
        self._runtime_known = runtime is None
        self.pool = (
            DockerPool(self, warm_pool, self.inside(webhook_url))
            if warm_pool > 0 and webhook_url
            else None
        )

    def inside(self, url: str) -> str:
        """Behind the boundary, this control plane is the bridge's gateway (`HOST_ALIAS`) at
        its own port, whatever address it is known by elsewhere."""
        if self.fence is None:
            return for_container(url)
        parts = urlsplit(url)
        return urlunsplit(parts._replace(scheme="http", netloc=f"{HOST_ALIAS}:{self.fence.port}"))

    @property
    def sandbox_side(self) -> str | None:
        return None if self.fence is None else self.fence.gateway

    async def start(self) -> None:
        if self.runtime is not None:
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
        known = await self.run(lambda client: sorted(client.info().get("Runtimes") or {}))
        if self.runtime not in known:
            raise ProviderError(
                f"Docker has no runtime {self.runtime!r} (it knows {', '.join(known) or 'none'}):"
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

    # -- create --------------------------------------------------------------------------------

    async def create(self, launch: Launch) -> Handle:
        self.check_spec(launch)
        await self._has_runtime()
        await self._fenced()
        claimed = (
            None
            if self.pool is None
            else await self.pool.claim(launch, self.inside(launch.webhook_url))
        )
        container_id = (
            claimed if claimed is not None else await self.run(self._start_container, launch)
        )
        try:
            handle = await self._wait_up(launch.sandbox_id, container_id, self.start_timeout)
            if self.fence is not None:  # until now it reached nothing beyond this host
                address = await self.run(_address, container_id, self.network)
                if address is None:
                    raise ProviderError("the container has no address on its network")
                await self.fence.admit(launch.sandbox_id, address, launch.network)
            return handle
        except BaseException:
            with anyio.CancelScope(shield=True):  # a cancelled start leaves nothing running
                await self.run(_remove_container, container_id)
            raise

    def _start_container(self, client: docker.DockerClient, launch: Launch) -> str:
        stale = self._find(client, launch.sandbox_id)
        if stale is not None:  # a start cut short earlier: this one replaces it
            stale.remove(force=True)
        container = self.make_container(
            client, launch.sandbox_id, name_of(launch.sandbox_id), self.inside(launch.webhook_url)
        )
        try:
            attached = client.api.attach_socket(str(container.id), params={"stdin": 1, "stream": 1})
            try:
                container.start()
                hand_over(attached, launch.keys())
            finally:
                close_attach(attached)
        except BaseException:
            container.remove(force=True)
            raise
        return str(container.id)

    def make_container(
        self,
        client: docker.DockerClient,
        sandbox_id: str,
        name: str,
        webhook_url: str,
        *,
        warm: bool = False,
    ) -> Container:
        """A sandbox's container, created (not started) with its volume; `warm`: its server
        loads everything first and waits for its keys (a warm pool's, `pool.py`)."""
        # On 127.0.0.1 only, a host port Docker picks (the SDK's stubs know no "any port").
        ports: dict[str, Any] = {PORT: ("127.0.0.1", None)}
        self._ensure_network(client)
        # Behind the boundary, the control plane and the resolver are the bridge's gateway.
        gateway = None if self.fence is None else self.fence.gateway
        if self.fence is not None and gateway is None:
            raise ProviderError("the sandboxes' network boundary is not up yet")
        fenced: dict[str, Any] = {} if gateway is None else {"dns": [gateway]}
        client.volumes.create(name=name_of(sandbox_id), labels=self.labels(sandbox_id))
        return client.containers.create(
            self.image,
            name=name,
            labels=self.labels(sandbox_id),
            environment=environment(webhook_url, keys_fd=0),
            # Not detached, stdin open: Docker closes the stdin once the one attach that
            # hands over the keys ends (StdinOnce).
            detach=False,
            stdin_open=True,
            entrypoint=WARM_ENTRYPOINT if warm else None,
            ports=ports,
            network=self.network,
            volumes={name_of(sandbox_id): {"bind": VOLUME_DIR, "mode": "rw"}},
            extra_hosts={HOST_ALIAS: gateway or "host-gateway"},
            **fenced,
            user=USER,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            read_only=True,
            tmpfs=tmpfs(self.limits),
            shm_size=self.limits.shm,
            mem_limit=self.limits.memory,
            nano_cpus=int(self.limits.cpus * 1e9),
            pids_limit=self.limits.pids,
            healthcheck=NO_HEALTHCHECK,
            runtime=self.runtime,
        )

    def _ensure_network(self, client: docker.DockerClient) -> dict[str, Any]:
        """The sandboxes' bridge network (its attributes), made when missing; one that lets
        containers talk to each other (made by someone else under that name) is refused."""
        try:
            network = client.networks.get(self.network)
        except docker.errors.NotFound:
            try:
                made = client.networks.create(
                    self.network,
                    driver="bridge",
                    options={ICC: "false"},
                    labels={"agent-server.sandboxes": "true"},
                )
                made.reload()
                return dict(made.attrs)
            except docker.errors.APIError as exc:  # another control plane made it meanwhile
                if exc.status_code != 409:
                    raise
                network = client.networks.get(self.network)
        options = network.attrs.get("Options") or {}
        if network.attrs.get("Driver") != "bridge" or options.get(ICC) != "false":
            raise ProviderError(
                f"the Docker network {self.network!r} lets containers reach each "
                f"other (it needs the bridge driver with {ICC}=false): remove it "
                "or set CONTROL_PLANE_DOCKER_NETWORK to another name"
            )
        return dict(network.attrs)

    async def _wait_up(self, sandbox_id: str, container_id: str, timeout: float) -> Handle:
        """Until /alive answers through the published port; ProviderError when the container
        ends first or the time is up. /alive is asked every ALIVE_INTERVAL, Docker only every
        STATE_INTERVAL: an inspection costs the daemon more than a refused connection costs
        anyone, and a start is over the moment the server answers."""
        handle: Handle | None = None
        look_at = 0.0

        async def look() -> Handle | None:
            nonlocal handle, look_at
            if handle is not None and await self.alive(handle):
                return handle
            if handle is None or time.monotonic() >= look_at:
                state = await self.run(_state, container_id)
                if state is None or state["Status"] not in ("running", "created"):
                    logs = await self.run(_logs, container_id)
                    status = (
                        "is gone" if state is None else f"exited with status {state['ExitCode']}"
                    )
                    raise ProviderError(f"the agent server's container {status}: {logs}")
                look_at = time.monotonic() + STATE_INTERVAL
                if handle is None and state["Status"] == "running":
                    handle = await self.run(_handle, sandbox_id, container_id)
                    return handle if await self.alive(handle) else None  # asked at once
            return None

        return await until_up(
            look,
            within=timeout,
            interval=ALIVE_INTERVAL,
            late=f"the agent server did not answer /alive within {self.start_timeout:g} s",
        )

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
            return await self.run(_handle, launch.sandbox_id, container_id)
        if status == "running":
            try:
                return await self._wait_up(launch.sandbox_id, container_id, self.start_timeout)
            except ProviderError:
                pass
        await self.run(_remove_container, container_id)
        return None

    async def inspect(self, handle: Handle) -> Liveness:
        def look(client: docker.DockerClient) -> str | None:
            container = self._find(client, handle.sandbox_id)
            if container is None or id_key(str(container.id)) != handle.pid_start_time:
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
        if container is None or id_key(str(container.id)) != handle.pid_start_time:
            raise ProviderError("the sandbox's container is gone")
        return container

    # -- destroy ------------------------------------------------------------------------------

    async def destroy(self, sandbox_id: str, handle: Handle | None, root_dir: Path) -> Path | None:
        """The container stopped (SIGTERM, SIGKILL after the grace period) and removed, the
        workspace archived from its volume, the volume removed. Works from labels and names
        alone, so a sandbox whose start was cut short (no handle) goes just as well. `root_dir`
        is a path inside the container: nothing of a sandbox is on this machine's disk."""
        if self.fence is not None:
            await self.fence.release(sandbox_id)
        return await self.run(self._destroy, sandbox_id)

    async def set_network(self, handle: Handle, policy: NetworkPolicy) -> bool:
        if self.fence is None:
            return False
        await self._fenced()

        def find(client: docker.DockerClient) -> ipaddress.IPv4Address | None:
            container = self._ours(client, handle)
            return address_of(container.attrs, self.network)

        address = await self.run(find)
        if address is None:
            raise ProviderError("the sandbox's container has no address on its network")
        await self.fence.admit(handle.sandbox_id, address, policy)
        return True

    async def refusals(self, handle: Handle) -> Refusals | None:
        if self.fence is None or self.fence.boundary is None:
            return None
        fence = self.fence.boundary.fence
        try:
            return await fence.refusals(
                handle.sandbox_id, await fence.address_of(handle.sandbox_id)
            )
        except NetworkError as exc:
            raise ProviderError(str(exc)) from None

    def _destroy(self, client: docker.DockerClient, sandbox_id: str) -> Path | None:
        container = self._find(client, sandbox_id)
        if container is not None and container.status in ("removing", "dead"):
            # Removed behind our back (`docker rm -f` returns before Docker is done): its
            # volume is what is left, and it is in use until the container is really gone.
            if container.status == "dead":
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    container.remove(force=True, v=True)
            _wait_gone(client, str(container.id), REMOVAL_TIMEOUT)
            container = None
        if container is not None:
            if container.status == "paused":  # a frozen process acts on no signal
                container.unpause()
            if container.status in ("running", "paused", "restarting"):
                container.stop(timeout=int(self.stop_grace + 0.999))
        archive = self._archive(client, sandbox_id, container)
        if container is not None:
            container.remove(force=True, v=True)
        try:
            client.volumes.get(name_of(sandbox_id)).remove(force=True)
        except docker.errors.NotFound:
            pass
        return archive

    def _archive(
        self, client: docker.DockerClient, sandbox_id: str, container: Container | None
    ) -> Path | None:
        """The workspace as `<archive dir>/<sandbox id>.tar.gz`, read through the Engine API
        from the sandbox's container, or from a container created (never started) on its
        volume when the sandbox's own is gone."""
        helper: Container | None = None
        try:
            if container is None:
                try:
                    client.volumes.get(name_of(sandbox_id))
                except docker.errors.NotFound:
                    return None
                helper = container = client.containers.create(
                    self.image,
                    labels=self.labels(sandbox_id),
                    network_disabled=True,
                    volumes={name_of(sandbox_id): {"bind": VOLUME_DIR, "mode": "ro"}},
                )
            try:
                chunks, _ = container.get_archive(WORKSPACE)
            except docker.errors.NotFound:
                return None
            return self.write_archive(sandbox_id, chunks)
        except docker.errors.ImageNotFound:
            logger.warning(
                "sandbox %s: its workspace is not archived (image %s is gone)",
                sandbox_id,
                self.image,
            )
            return None
        finally:
            if helper is not None:
                helper.remove(force=True)


# -- small blocking helpers (run through DockerProvider.run) ----------------------------------


def _state(client: docker.DockerClient, container_id: str) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = client.api.inspect_container(container_id)["State"]
        return state
    except docker.errors.NotFound:
        return None


def _handle(client: docker.DockerClient, sandbox_id: str, container_id: str) -> Handle:
    attrs = client.api.inspect_container(container_id)
    try:
        port = int(attrs["NetworkSettings"]["Ports"][PORT][0]["HostPort"])
    except (KeyError, IndexError, TypeError, ValueError):
        raise ProviderError("the container's port was not published") from None
    return Handle(
        sandbox_id=sandbox_id,
        pid=int(attrs["State"]["Pid"]),
        pid_start_time=id_key(container_id),
        port=port,
    )


def _address(
    client: docker.DockerClient, container_id: str, network: str
) -> ipaddress.IPv4Address | None:
    return address_of(client.api.inspect_container(container_id), network)


def _logs(client: docker.DockerClient, container_id: str) -> str:
    try:
        raw: bytes = client.api.logs(container_id, stdout=True, stderr=True, tail=40)
    except docker.errors.NotFound:
        return "(no log)"
    return raw[-LOG_TAIL:].decode(errors="replace").strip() or "(no log)"


def _remove_container(client: docker.DockerClient, container_id: str) -> None:
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        pass


def _wait_gone(client: docker.DockerClient, container_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            client.api.inspect_container(container_id)
        except docker.errors.NotFound:
            return
        time.sleep(0.05)
    raise ProviderError(f"container {container_id[:12]} is still being removed after {timeout:g} s")
