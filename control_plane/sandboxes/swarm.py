"""The Swarm provider: each sandbox is a one-replica service of the sandbox image on a Docker
Swarm cluster, driven through a manager's Engine API by the Docker SDK for Python. Any control
plane of a deployment reaches every sandbox of the cluster through a manager; the leases of the
database keep two of them from acting on one sandbox at once.

A sandbox's service:
- is named and labelled as a Docker provider's container is (`containers`): the sandbox's id
  and the deployment's digest, which is how any control plane finds it again;
- keeps its agent-server state and its workspace on a named volume of the node its task runs
  on (Docker makes it there with the first task). Swarm never moves the task: its restart
  policy is `none`, so a task that dies is not replaced on another node where the volume is not
  (the sandbox is MISSING, with the task's end as the reason), and a pause pins the service to
  its node;
- publishes the agent server's port in host mode on its node (no routing mesh: it needs IPVS,
  and a sandbox's address must name the node its volume is on); its URL is the node's address
  and the published port, stored in its handle;
- runs on a swarm-scoped bridge network made from a config-only network on each node with
  inter-container traffic off (`Config` names it; the provider checks it, the operator makes
  it, see the README): sandboxes of a node cannot reach each other's ports on it;
- gets its session key in a Docker secret of its own (encrypted in the managers' Raft log,
  never in the service's spec), mounted for root only (0400). Its entrypoint starts as root
  under tini, opens the secret on a descriptor and execs the agent server through `setpriv`
  as the image's user (uid 1000) with no capabilities, an empty bounding set and no_new_privs,
  the descriptor named by AGENT_SERVER_KEYS_FD: the agent server reads it and closes it, and
  nothing it starts can open the file, gain root through a setuid program, or read the key
  from an environment (`agent_server.secrecy`). tini stays as root with nothing of the key;
- runs with a read-only root, tmpfs /tmp and home, every capability dropped but the four the
  entrypoint's root step uses, the memory, CPU and process limits of the settings, and the
  reservations and placement constraints of the settings (a sandbox no node can take ends its
  start with the scheduler's reason after `placement_timeout`);
- is RUNNING once `/alive` answers on its node's address.

Swarm cannot freeze a service, so a pause stops it: the service is scaled to 0, pinned to its
node (`node.id==`) with its published port fixed; its volume stays on the node. The agent server
stops as on any shutdown (its log and workspace are on the volume; runs the pause interrupted
go on after the resume); shells and processes the agent left running end. Resume scales it
back to 1 on that node. A resume is refused while that node is down or drained (`Refused`: the
sandbox stays PAUSED), and the sandbox is MISSING once the node has left the cluster.

Destroy stops the service, then two short jobs on its node (`nodejobs`) archive the workspace
from the volume and remove the volume; then the service and its secret go. While the node is
down this fails and the clean-up is tried again later; once the node has left the cluster
there is nothing left to reach.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import docker
import docker.errors
import docker.types
import httpx

from control_plane.sandboxes.containers import (
    DEFAULT_LIMITS,
    HOME,
    HOME_BYTES,
    PORT_NUMBER,
    STATE_DIR,
    TMP_BYTES,
    UID,
    ContainerProvider,
    Limits,
    environment,
    name_of,
)
from control_plane.sandboxes.nodejobs import (
    ENDED,
    NO_CHECK,
    Jobs,
    Node,
    api,
    describe,
    host_port,
)
from control_plane.sandboxes.provider import (
    Handle,
    Health,
    Launch,
    Liveness,
    ProviderError,
    Refused,
    SandboxSpec,
)

logger = logging.getLogger(__name__)

SPEC = SandboxSpec(id="swarm", description="a one-replica service of the sandbox image on a "
                   "Docker Swarm cluster, as an unprivileged user with a read-only root and limits, "
                   "its state and workspace in a volume of the node it runs on")
KEYS_FILE = "agent-server-keys"
"""The secret's file under /run/secrets."""
KEYS_FD = 3
#: The entrypoint's root step (and tini, which signals the agent server): what they need,
#: none of which the agent server has (setpriv drops them all).
ROOT_CAPS = ["CAP_CHOWN", "CAP_KILL", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"]
ENTRYPOINT = (
    f"chown {UID}:{UID} {HOME}"
    f" && exec {KEYS_FD}</run/secrets/{KEYS_FILE}"
    f" && exec setpriv --reuid={UID} --regid={UID} --clear-groups --inh-caps=-all"
    " --bounding-set=-all --no-new-privs --"
    f" agent-server --host 0.0.0.0 --port {PORT_NUMBER} --state-dir {STATE_DIR}")
#: Node states in which nothing runs there.
NODE_AWAY = {"down", "unknown", "disconnected"}
#: Task states before the scheduler has placed it.
UNPLACED = {"new", "allocated", "pending"}
#: How the scheduler and a node say a host-mode port is taken.
PORT_TAKEN = ("port already in use", "address already in use")


def service_key(service_id: str) -> int:
    """60 bits of the service's id: stored as the handle's pid_start_time (a signed BIGINT), it
    tells our service from another of the same name."""
    return int(hashlib.sha256(service_id.encode()).hexdigest()[:15], 16)


def node_of(attrs: dict[str, Any]) -> Node:
    """A node's id, hostname and the address its published ports answer on."""
    address = str((attrs.get("Status") or {}).get("Addr") or "")
    if address in ("", "0.0.0.0"):  # a manager may report its address only here
        address = str((attrs.get("ManagerStatus") or {}).get("Addr", "")).rpartition(":")[0]
    return Node(id=str(attrs["ID"]), hostname=str(attrs["Description"]["Hostname"]),
                address=address)


def newest(tasks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The service's current task: the newest meant to run, else the newest."""
    def created(task: dict[str, Any]) -> tuple[str, str]:
        main, _, fraction = str(task.get("CreatedAt", "")).rstrip("Z").partition(".")
        return main, fraction.ljust(9, "0")
    running = [t for t in tasks if t.get("DesiredState") == "running"]
    return max(running or tasks, key=created, default=None)


def pinned(spec: dict[str, Any]) -> str | None:
    """The node a paused service is pinned to."""
    for constraint in (spec["TaskTemplate"].get("Placement") or {}).get("Constraints") or []:
        field, _, value = str(constraint).replace(" ", "").partition("==")
        if field == "node.id":
            return value
    return None


def replicas(spec: dict[str, Any]) -> int:
    return int(spec["Mode"]["Replicated"]["Replicas"])


def published(task: dict[str, Any]) -> int | None:
    for port in (task.get("Status") or {}).get("PortStatus", {}).get("Ports") or []:
        if port.get("TargetPort") == PORT_NUMBER and port.get("PublishedPort"):
            return int(port["PublishedPort"])
    return None


class SwarmProvider(ContainerProvider):
    spec = SPEC

    def __init__(self, archive_dir: Path, *, image: str, plane: str, network: str,
                 docker_url: str = "unix:///var/run/docker.sock",
                 constraints: tuple[str, ...] = (), cpu_reservation: float = 0.0,
                 memory_reservation: int = 0, limits: Limits = DEFAULT_LIMITS,
                 start_timeout: float = 60.0, placement_timeout: float = 30.0,
                 stop_grace: float = 5.0, node_socket: str = "/var/run/docker.sock",
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(archive_dir, image=image, plane=plane, docker_url=docker_url,
                         limits=limits, start_timeout=start_timeout, stop_grace=stop_grace,
                         transport=transport)
        self.network = network
        self.constraints = constraints
        self.cpu_reservation = cpu_reservation
        self.memory_reservation = memory_reservation
        self.placement_timeout = placement_timeout
        self.node_socket = node_socket

    # -- finding things ---------------------------------------------------------------------

    def _find(self, client: docker.DockerClient, sandbox_id: str) -> dict[str, Any] | None:
        """The sandbox's service (its jobs carry the same labels, not its name)."""
        name = name_of(sandbox_id)
        for service in api(client).services(filters=self.label_filter(sandbox_id)):
            if service["Spec"]["Name"] == name:
                found: dict[str, Any] = service
                return found
        return None

    def _ours(self, client: docker.DockerClient, handle: Handle) -> dict[str, Any]:
        service = self._find(client, handle.sandbox_id)
        if service is None or service_key(service["ID"]) != handle.pid_start_time:
            raise ProviderError("the sandbox's service is gone")
        return service

    @staticmethod
    def _tasks(client: docker.DockerClient, service_id: str) -> list[dict[str, Any]]:
        tasks: list[dict[str, Any]] = api(client).tasks(filters={"service": service_id})
        return tasks

    @staticmethod
    def _node(client: docker.DockerClient, node_id: str) -> tuple[Node, dict[str, Any]] | None:
        """The node and its status; None once it has left the cluster."""
        try:
            attrs: dict[str, Any] = api(client).inspect_node(node_id)
        except docker.errors.NotFound:
            return None
        return node_of(attrs), attrs

    def _volume_node(self, client: docker.DockerClient, service: dict[str, Any]) -> str | None:
        """Where the sandbox's volume is: the node it is pinned to, else its task's."""
        node_id = pinned(service["Spec"])
        if node_id is None:
            placed = [t for t in self._tasks(client, service["ID"]) if t.get("NodeID")]
            task = newest(placed)
            node_id = None if task is None else str(task["NodeID"])
        return node_id

    # -- create ------------------------------------------------------------------------------

    async def create(self, launch: Launch) -> Handle:
        self.check_spec(launch)
        if await self._run(self._find, launch.sandbox_id) is not None:
            await self._remove_all(launch.sandbox_id)  # a start cut short: this one replaces it
        service_id = await self._run(self._start_service, launch)
        try:
            return await self._wait_up(launch.sandbox_id, service_id, self.placement_timeout)
        except BaseException:
            with anyio.CancelScope(shield=True):  # a failed start leaves nothing on any node
                try:
                    await self._remove_all(launch.sandbox_id)
                except ProviderError as exc:  # its remains go with the sandbox's clean-up
                    logger.warning("sandbox %s: removing a failed start: %s", launch.sandbox_id,
                                   exc)
            raise

    def _start_service(self, client: docker.DockerClient, launch: Launch) -> str:
        name = name_of(launch.sandbox_id)
        labels = self.labels(launch.sandbox_id)
        self._check_network(client)
        self._remove_secrets(client, launch.sandbox_id)
        secret = api(client).create_secret(f"{name}-keys", launch.keys(), labels=labels)
        container = docker.types.ContainerSpec(
            self.image, command=["tini", "--", "sh", "-c", ENTRYPOINT], user="0:0",
            env=[f"{k}={v}" for k, v in environment(launch, launch.webhook_url, KEYS_FD).items()],
            labels=labels,
            mounts=[
                docker.types.Mount(STATE_DIR, name, type="volume", labels=labels),
                docker.types.Mount("/tmp", None, type="tmpfs", tmpfs_size=TMP_BYTES,
                                   tmpfs_mode=0o1777),
                docker.types.Mount(HOME, None, type="tmpfs", tmpfs_size=HOME_BYTES,
                                   tmpfs_mode=0o700)],
            secrets=[docker.types.SecretReference(secret["ID"], f"{name}-keys", filename=KEYS_FILE,
                                                  uid="0", gid="0", mode=0o400)],
            read_only=True, cap_drop=["ALL"], cap_add=ROOT_CAPS, healthcheck=NO_CHECK,
            stop_grace_period=int(self.stop_grace * 1e9))
        resources = docker.types.Resources(
            cpu_limit=int(self.limits.cpus * 1e9), mem_limit=self.limits.memory,
            cpu_reservation=int(self.cpu_reservation * 1e9) or None,
            mem_reservation=self.memory_reservation or None)
        resources["Limits"]["Pids"] = self.limits.pids
        template = docker.types.TaskTemplate(
            container, resources=resources, restart_policy=docker.types.RestartPolicy("none"),
            placement=docker.types.Placement(constraints=list(self.constraints)),
            networks=[self.network])
        try:
            service = api(client).create_service(
                template, name=name, labels=labels, mode=docker.types.ServiceMode("replicated", 1),
                endpoint_spec=host_port(None))
        except BaseException:
            self._remove_secrets(client, launch.sandbox_id)
            raise
        return str(service["ID"])

    def _check_network(self, client: docker.DockerClient) -> None:
        """The sandboxes' network must be a swarm-scoped bridge made from a config-only network
        with inter-container traffic off; refused (with the commands that make it) otherwise."""
        how = (f"make it once: `docker network create --config-only -o "
               f"com.docker.network.bridge.enable_icc=false {self.network}-config` on every node, "
               f"then `docker network create -d bridge --scope swarm --config-from "
               f"{self.network}-config {self.network}` on a manager (or set "
               "CONTROL_PLANE_SWARM_NETWORK)")
        try:
            network = client.networks.get(self.network).attrs
        except docker.errors.NotFound:
            raise ProviderError(f"the swarm network {self.network!r} is missing: {how}") from None
        config = (network.get("ConfigFrom") or {}).get("Network")
        if network.get("Driver") != "bridge" or network.get("Scope") != "swarm" or not config:
            raise ProviderError(f"the network {self.network!r} is not a swarm-scoped bridge made "
                                f"from a config-only network, so sandboxes could reach each other: {how}")
        try:
            options = client.networks.get(config).attrs.get("Options") or {}
        except docker.errors.NotFound:
            return  # the manager runs no sandboxes: each node's own config says
        if options.get("com.docker.network.bridge.enable_icc") != "false":
            raise ProviderError(f"the config network {config!r} lets containers reach each other: {how}")

    async def _wait_up(self, sandbox_id: str, service_id: str, placement: float,
                       earlier: frozenset[str] = frozenset()) -> Handle:
        """Until its task runs and /alive answers; ProviderError when no node takes it within
        `placement` seconds, when the task ends, or when the start timeout is up. `earlier`:
        the ids of tasks that ended before (a paused sandbox's), not the one waited for."""
        began = time.monotonic()
        deadline = began + placement + self.start_timeout
        handle: Handle | None = None
        while True:
            task, node = await self._run(self._current, service_id, earlier)
            state = "new" if task is None else str(task["Status"]["State"])
            now = time.monotonic()
            if task is not None and state in ENDED:
                logs = await self._run(_logs, service_id)
                raise ProviderError(f"the agent server's task ended ({describe(task)}): {logs}")
            if state in UNPLACED and now > began + placement:
                reason = (task or {}).get("Status", {}).get("Err") or "no node took it"
                raise ProviderError(f"no node can take the sandbox within {placement:g} s: "
                                    f"{reason} (placement constraints {list(self.constraints)}, "
                                    f"reservations {self.cpu_reservation:g} CPUs, "
                                    f"{self.memory_reservation} bytes)")
            if task is not None and state == "running" and node is not None:
                port = published(task)
                if port is None:
                    raise ProviderError("the agent server's port was not published")
                handle = Handle(sandbox_id=sandbox_id,
                                pid=int(task["Status"].get("ContainerStatus", {}).get("PID") or 0),
                                pid_start_time=service_key(service_id), port=port,
                                host=node.address)
                if await self.alive(handle):
                    return handle
            if now > deadline:
                raise ProviderError(f"the agent server did not answer /alive within "
                                    f"{self.start_timeout:g} s (its task is {state})")
            await anyio.sleep(0.1)

    def _current(self, client: docker.DockerClient, service_id: str,
                 earlier: frozenset[str]) -> tuple[dict[str, Any] | None, Node | None]:
        task = newest([t for t in self._tasks(client, service_id) if t["ID"] not in earlier])
        if task is None or not task.get("NodeID"):
            return task, None
        found = self._node(client, str(task["NodeID"]))
        return task, None if found is None else found[0]

    # -- adoption, health -------------------------------------------------------------------

    async def recover(self, launch: Launch) -> Handle | None:
        """The service of a start cut short, found by its labels: its handle once it answers
        (or is paused); otherwise it is stopped (its volume kept for the clean-up's archive)
        and None returned."""
        service = await self._run(self._find, launch.sandbox_id)
        if service is None:
            return None
        if replicas(service["Spec"]) == 0:
            return await self._run(self._paused_handle, launch.sandbox_id, service)
        try:
            return await self._wait_up(launch.sandbox_id, service["ID"], self.placement_timeout)
        except ProviderError:
            pass
        await self._stop(service["ID"])
        return None

    def _paused_handle(self, client: docker.DockerClient, sandbox_id: str,
                       service: dict[str, Any]) -> Handle | None:
        node_id = pinned(service["Spec"])
        ports = service["Spec"].get("EndpointSpec", {}).get("Ports") or []
        found = None if node_id is None else self._node(client, node_id)
        if found is None or not ports or not ports[0].get("PublishedPort"):
            return None
        return Handle(sandbox_id=sandbox_id, pid=0, pid_start_time=service_key(service["ID"]),
                      port=int(ports[0]["PublishedPort"]), host=found[0].address)

    async def inspect(self, handle: Handle) -> Liveness:
        return (await self.health(handle)).liveness

    async def health(self, handle: Handle) -> Health:
        """The scheduler's view first (the service, its node, its task), then /alive."""
        look, where = await self._run(self._look, handle)
        if look.liveness is Liveness.ALIVE and not await self.alive(handle):
            return Health(Liveness.UNRESPONSIVE, f"its task on {where} does not answer")
        return look

    def _look(self, client: docker.DockerClient, handle: Handle) -> tuple[Health, str]:
        """The scheduler's view, and the node's name."""
        service = self._find(client, handle.sandbox_id)
        if service is None or service_key(service["ID"]) != handle.pid_start_time:
            return Health(Liveness.GONE, "its service was removed"), ""
        task = newest(self._tasks(client, service["ID"]))
        node_id = pinned(service["Spec"]) or (task or {}).get("NodeID")
        where = "its node"
        if node_id:
            found = self._node(client, str(node_id))
            if found is None:
                return Health(Liveness.GONE, f"its node {str(node_id)[:12]} left the cluster "
                              "(its workspace was on that node's volume)"), where
            node, attrs = found
            where = node.hostname
            state = str(attrs["Status"]["State"])
            if state in NODE_AWAY and replicas(service["Spec"]) > 0:
                message = attrs["Status"].get("Message") or state
                return Health(Liveness.UNRESPONSIVE, f"its node {where} is {state} "
                              f"({message})"), where
        if replicas(service["Spec"]) == 0:
            return Health(Liveness.STOPPED), where
        if task is None:
            return Health(Liveness.UNRESPONSIVE, "it has no task yet"), where
        state = str(task["Status"]["State"])
        if state in ENDED:
            return Health(Liveness.GONE, f"its task on {where} ended ({describe(task)})"), where
        if state != "running":
            return Health(Liveness.UNRESPONSIVE, f"its task on {where} is {state}"), where
        return Health(Liveness.ALIVE), where

    # -- pause, resume ----------------------------------------------------------------------

    async def pause(self, handle: Handle) -> None:
        """Scaled to 0 and pinned to its node, its published port fixed; returns once its
        task has stopped (PAUSED is stored only then)."""
        def scale_down(client: docker.DockerClient) -> str:
            service = self._ours(client, handle)
            node = self._reachable_node(client, service)  # down: it cannot be told to stop
            node_id = None if node is None else node.id

            def change(spec: dict[str, Any]) -> None:
                spec["Mode"] = {"Replicated": {"Replicas": 0}}
                if node_id is not None:
                    _pin(spec, node_id)
                spec["EndpointSpec"] = host_port(handle.port)
            _update(client, service["ID"], change)
            return str(service["ID"])
        await self._stop(await self._run(scale_down))

    async def resume(self, handle: Handle) -> Handle:
        def scale_up(client: docker.DockerClient) -> tuple[str, frozenset[str]]:
            service = self._ours(client, handle)
            earlier = frozenset(t["ID"] for t in self._tasks(client, service["ID"]))
            node_id = pinned(service["Spec"])
            if node_id is not None:
                found = self._node(client, node_id)
                if found is None:
                    raise ProviderError(f"its node {node_id[:12]} left the cluster, and its "
                                        "workspace was on that node's volume")
                node, attrs = found
                state = str(attrs["Status"]["State"])
                availability = str(attrs.get("Spec", {}).get("Availability", "active"))
                if state != "ready" or availability != "active":
                    raise Refused(f"its node {node.hostname} is {state}, {availability}: its "
                                  "workspace is on that node's volume; resume it once the node "
                                  "is back")
            _update(client, service["ID"], _restart)
            return str(service["ID"]), earlier
        service_id, earlier = await self._run(scale_up)
        try:
            return await self._wait_up(handle.sandbox_id, service_id, self.placement_timeout,
                                       earlier)
        except ProviderError as exc:
            # Its port taken on the node meanwhile: once more with a port the node picks.
            if not any(words in str(exc) for words in PORT_TAKEN):
                raise
        earlier = frozenset(t["ID"] for t in await self._run(self._tasks, service_id))

        def republish(spec: dict[str, Any]) -> None:
            _publish(None)(spec)
            _restart(spec)
        await self._run(lambda c: _update(c, service_id, republish))
        return await self._wait_up(handle.sandbox_id, service_id, self.placement_timeout, earlier)

    async def _stop(self, service_id: str) -> None:
        """Scaled to 0 (when it is not yet), until no task of it runs any more."""
        await self._run(lambda c: _update(c, service_id, _scale(0)))
        deadline = time.monotonic() + self.stop_grace + 30
        while True:
            tasks = await self._run(self._tasks, service_id)
            live = [t for t in tasks if t["Status"]["State"] not in ENDED]
            if not live:
                return
            if time.monotonic() > deadline:
                raise ProviderError(f"the sandbox's task is still {live[0]['Status']['State']} "
                                    f"{self.stop_grace + 30:g} s after it was told to stop")
            await anyio.sleep(0.05)

    # -- destroy ----------------------------------------------------------------------------

    async def destroy(self, sandbox_id: str, handle: Handle | None, root_dir: Path) -> Path | None:
        """Stopped, the workspace archived from its volume and the volume removed by jobs on
        its node, then the service and its secret removed. Works from labels alone (a start cut
        short has no handle). Its node down: ProviderError, tried again later."""
        service = await self._run(self._find, sandbox_id)
        archive: Path | None = None
        if service is not None:
            node = await self._run(self._reachable_node, service)
            await self._stop(service["ID"])
            if node is not None:
                archive = await self._run(self._archive, sandbox_id, node)
                await self._run(self._remove_volume, sandbox_id, node)
        await self._run(self._remove_objects, sandbox_id)
        return archive

    def _reachable_node(self, client: docker.DockerClient, service: dict[str, Any]) -> Node | None:
        """The node of the volume, None when there is none (never placed, or the node left the
        cluster); ProviderError while it is down (the clean-up is tried again)."""
        node_id = self._volume_node(client, service)
        if node_id is None:
            return None
        found = self._node(client, node_id)
        if found is None:
            logger.warning("sandbox %s: its node %s left the cluster: its workspace is not "
                           "archived", service["Spec"]["Labels"].get("agent-server.sandbox"),
                           node_id[:12])
            return None
        node, attrs = found
        if attrs["Status"]["State"] != "ready":
            raise ProviderError(f"its node {node.hostname} is {attrs['Status']['State']}: its "
                                "workspace is archived and its volume removed once it is back")
        return node

    def _jobs(self, client: docker.DockerClient, sandbox_id: str) -> Jobs:
        return Jobs(client, image=self.image, labels=self.labels(sandbox_id),
                    start_timeout=self.placement_timeout + self.start_timeout,
                    node_socket=self.node_socket)

    def _archive(self, client: docker.DockerClient, sandbox_id: str, node: Node) -> Path | None:
        chunks = self._jobs(client, sandbox_id).archive(name_of(sandbox_id), node,
                                                         name_of(sandbox_id))
        return None if chunks is None else self.write_archive(sandbox_id, chunks, compressed=True)

    def _remove_volume(self, client: docker.DockerClient, sandbox_id: str, node: Node) -> None:
        self._jobs(client, sandbox_id).remove_volume(name_of(sandbox_id), node, name_of(sandbox_id))

    async def _remove_all(self, sandbox_id: str) -> None:
        """Everything of a sandbox whose start failed, its volume too (nothing to archive)."""
        service = await self._run(self._find, sandbox_id)
        if service is not None:
            node = await self._run(self._reachable_node, service)
            await self._stop(service["ID"])
            if node is not None:
                await self._run(self._remove_volume, sandbox_id, node)
        await self._run(self._remove_objects, sandbox_id)

    def _remove_objects(self, client: docker.DockerClient, sandbox_id: str) -> None:
        """The service, its jobs and its secret (the secret once no service uses it)."""
        for service in api(client).services(filters=self.label_filter(sandbox_id)):
            try:
                api(client).remove_service(service["ID"])
            except docker.errors.NotFound:
                pass
        self._remove_secrets(client, sandbox_id)

    def _remove_secrets(self, client: docker.DockerClient, sandbox_id: str) -> None:
        for secret in api(client).secrets(filters=self.label_filter(sandbox_id)):
            try:
                api(client).remove_secret(secret["ID"])
            except docker.errors.NotFound:
                pass


# -- service specs --------------------------------------------------------------------------

def _pin(spec: dict[str, Any], node_id: str) -> None:
    placement = spec["TaskTemplate"].setdefault("Placement", {})
    constraints = [c for c in placement.get("Constraints") or []
                   if not c.replace(" ", "").startswith("node.id==")]
    placement["Constraints"] = [*constraints, f"node.id=={node_id}"]


def _scale(count: int) -> Callable[[dict[str, Any]], None]:
    def change(spec: dict[str, Any]) -> None:
        spec["Mode"] = {"Replicated": {"Replicas": count}}
    return change


def _restart(spec: dict[str, Any]) -> None:
    """One replica again. Under the restart policy `none` the slot counts as done and no task
    would be made for it: a forced update makes one."""
    spec["Mode"] = {"Replicated": {"Replicas": 1}}
    spec["TaskTemplate"]["ForceUpdate"] = int(spec["TaskTemplate"].get("ForceUpdate") or 0) + 1


def _publish(port: int | None) -> Callable[[dict[str, Any]], None]:
    def change(spec: dict[str, Any]) -> None:
        spec["EndpointSpec"] = host_port(port)
    return change


def _update(client: docker.DockerClient, service_id: str,
            change: Callable[[dict[str, Any]], None], attempts: int = 5) -> None:
    """Apply `change` to the service's spec; again on a newer version when another writer
    came first (the manager refuses an update of an old version)."""
    for attempt in range(attempts):
        current = api(client).inspect_service(service_id)
        spec: dict[str, Any] = current["Spec"]
        before = repr(spec)
        change(spec)
        if repr(spec) == before:
            return
        try:
            api(client).update_service(
                service_id, current["Version"]["Index"], task_template=spec["TaskTemplate"],
                name=spec["Name"], labels=spec.get("Labels"), mode=spec["Mode"],
                endpoint_spec=spec.get("EndpointSpec"))
            return
        except docker.errors.APIError as exc:
            if "out of sequence" not in str(exc) or attempt == attempts - 1:
                raise


def _logs(client: docker.DockerClient, service_id: str) -> str:
    try:
        raw = b"".join(api(client).service_logs(service_id, stdout=True, stderr=True, tail="40"))
    except docker.errors.DockerException:
        return "(no log)"
    return raw[-2000:].decode(errors="replace").strip() or "(no log)"

