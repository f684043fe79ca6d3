"""The Swarm provider: each sandbox is a one-replica service of the sandbox image on a Docker
Swarm cluster, driven through a manager's Engine API by the Docker SDK for Python. Any control
plane of a deployment reaches every sandbox of the cluster through a manager; the leases of the
database keep two of them from acting on one sandbox at once.

A sandbox's service:
- is named and labelled as a Docker provider's container is (`containers`): the sandbox's id
  and the deployment's digest, which is how any control plane finds it again;
- keeps its agent-server state and its workspace on a named volume of the node its task runs
  on (made there with the first task). Swarm never moves the task: its restart policy is
  `none`, so a task that dies is not replaced on another node where the volume is not (the
  sandbox is MISSING, the task's end the reason), and a pause pins the service to its node;
- publishes the agent server's port in host mode on its node (no routing mesh: it needs IPVS,
  and a sandbox's address must name the node its volume is on); its URL is the node's address
  and the published port, stored in its handle;
- runs on its node's default bridge (`Config.swarm_network`), whose daemon keeps containers
  apart (`"icc": false` on every node that takes sandboxes, README);
- gets its session key in a Docker secret, runs hardened with the limits, reservations and
  placement constraints of the settings (`spec`: its spec); a warm pool's (`pool`)
  is made in advance and gets its keys over its port when a start claims it;
- is RUNNING once `/alive` answers on its node's address (on gVisor, and once its node's fence
  holds it and says it runs on runsc: `fence`).

Swarm cannot freeze a service, so a pause stops it: the service is scaled to 0, pinned to its
node (`node.id==`) with its published port fixed; its volume stays on the node. The agent server
stops as on any shutdown (its log and workspace are on the volume; runs the pause interrupted
go on after the resume); shells and processes the agent left running end. Resume scales it
back to 1 on that node. A resume is refused while that node is down or drained (`Refused`: the
sandbox stays PAUSED), and the sandbox is MISSING once the node has left the cluster.

Destroy stops the service, two short jobs on its node (`nodejobs`) archive the workspace and
remove the volume, then the service and its secrets go (tried again while the node is down).
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import anyio
import docker
import docker.errors
import httpx

from control_plane.network.fence import Refusals
from control_plane.network.policy import NetworkPolicy
from control_plane.providers.containers import ContainerProvider, name_of
from control_plane.providers.swarm.fence import SwarmFence
from control_plane.providers.swarm.manager import check_network, service_logs, unparked, update
from control_plane.providers.swarm.nodejobs import ENDED, Jobs, Node, api, describe, host_port
from control_plane.providers.swarm.pool import LABEL_PARKED, LIFELINE, SwarmPool
from control_plane.providers.swarm.spec import (
    NODE_AWAY,
    PORT_TAKEN,
    SPEC,
    UNPLACED,
    newest,
    node_of,
    pin,
    pinned,
    publish,
    published,
    replicas,
    restart,
    scale,
    service_key,
    task_template,
)
from control_plane.sandboxes.provider import (
    DEFAULT_LIMITS,
    Handle,
    Health,
    Launch,
    Limits,
    Liveness,
    ProviderError,
    Refused,
    until_up,
)

logger = logging.getLogger(__name__)


class SwarmProvider(ContainerProvider):
    spec = SPEC

    def __init__(
        self,
        archive_dir: Path,
        *,
        image: str,
        plane: str,
        network: str,
        docker_url: str = "unix:///var/run/docker.sock",
        constraints: tuple[str, ...] = (),
        cpu_reservation: float = 0.0,
        memory_reservation: int = 0,
        limits: Limits = DEFAULT_LIMITS,
        start_timeout: float = 60.0,
        placement_timeout: float = 30.0,
        stop_grace: float = 5.0,
        node_socket: str = "/var/run/docker.sock",
        warm_pool: int = 0,
        webhook_url: str | None = None,
        lifeline: float = LIFELINE,
        transport: httpx.AsyncBaseTransport | None = None,
        fence: SwarmFence | None = None,
    ) -> None:
        """`warm_pool`: services parked for new sandboxes (`pool`), `lifeline` theirs;
        `fence`: the nodes' network boundary (`fence`; None: the nodes' bridges alone)."""
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
        self.constraints = constraints
        self.cpu_reservation = cpu_reservation
        self.memory_reservation = memory_reservation
        self.placement_timeout = placement_timeout
        self.node_socket = node_socket
        self.pool = (
            SwarmPool(self, warm_pool, webhook_url, lifeline)
            if warm_pool > 0 and webhook_url
            else None
        )
        self.fence = fence

    async def start(self) -> None:
        if self.fence is not None:  # the nodes' fences, before any sandbox runs there
            try:
                await self.run(self.fence.ensure)
            except ProviderError as exc:  # the manager away: the next start tries again
                logger.warning("%s", exc)
        await super().start()

    async def set_network(self, handle: Handle, policy: NetworkPolicy) -> bool:
        return self.fence is not None and await self.fence.set_network(handle, policy)

    async def refusals(self, handle: Handle) -> Refusals | None:
        return None if self.fence is None else self.fence.refusals(handle.sandbox_id)

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
        service_id = (
            None if self.pool is None else await self.pool.claim(launch, launch.webhook_url)
        )
        if service_id is None:
            if await self.run(self._find, launch.sandbox_id) is not None:
                await self.remove_all(launch.sandbox_id)  # a start cut short: replaced
            service_id = await self.run(self.start_service, launch)
        try:
            return await self._wait_up(launch.sandbox_id, service_id, self.placement_timeout)
        except BaseException:
            with anyio.CancelScope(shield=True):  # a failed start leaves nothing on any node
                try:
                    await self.remove_all(launch.sandbox_id)
                except ProviderError as exc:  # its remains go with the sandbox's clean-up
                    logger.warning(
                        "sandbox %s: removing a failed start: %s", launch.sandbox_id, exc
                    )
            raise

    def start_service(
        self,
        client: docker.DockerClient,
        launch: Launch,
        *,
        secret: bytes | None = None,
        server: str = "agent-server",
        parked: bool = False,
    ) -> str:
        """The sandbox's service, its keys in its secret (a parked one's: `secret`, with
        `server` its command and `parked` its label)."""
        name = name_of(launch.sandbox_id)
        labels = self.labels(launch.sandbox_id)
        check_network(client, self.network)
        self._remove_secrets(client, launch.sandbox_id)
        made = api(client).create_secret(f"{name}-keys", secret or launch.keys(), labels=labels)
        template = task_template(
            self.image,
            launch,
            made["ID"],
            labels,
            stop_grace=self.stop_grace,
            limits=self.limits,
            cpu_reservation=self.cpu_reservation,
            memory_reservation=self.memory_reservation,
            constraints=self.constraints,
            network=self.network,
            server=server,
        )
        try:
            service = api(client).create_service(
                template,
                name=name,
                labels={**labels, **({LABEL_PARKED: "true"} if parked else {})},
                mode=docker.types.ServiceMode("replicated", 1),
                endpoint_spec=host_port(None),
            )
        except BaseException:
            self._remove_secrets(client, launch.sandbox_id)
            raise
        return str(service["ID"])

    async def _wait_up(
        self,
        sandbox_id: str,
        service_id: str,
        placement: float,
        earlier: frozenset[str] = frozenset(),
    ) -> Handle:
        """Until its task runs and /alive answers; ProviderError when no node takes it within
        `placement` seconds, when the task ends, or when the start timeout is up. `earlier`:
        the ids of tasks that ended before (a paused sandbox's), not the one waited for."""
        began = time.monotonic()
        state = "new"

        async def look() -> Handle | None:
            nonlocal state
            task, node = await self.run(self.current, service_id, earlier)
            state = "new" if task is None else str(task["Status"]["State"])
            if task is not None and state in ENDED:
                logs = await self.run(service_logs, service_id)
                raise ProviderError(f"the agent server's task ended ({describe(task)}): {logs}")
            if state in UNPLACED and time.monotonic() > began + placement:
                reason = (task or {}).get("Status", {}).get("Err") or "no node took it"
                raise ProviderError(
                    f"no node can take the sandbox within {placement:g} s: "
                    f"{reason} (placement constraints {list(self.constraints)}, "
                    f"reservations {self.cpu_reservation:g} CPUs, "
                    f"{self.memory_reservation} bytes)"
                )
            if task is None or state != "running" or node is None:
                return None
            port = published(task)
            if port is None:
                raise ProviderError("the agent server's port was not published")
            handle = Handle(
                sandbox_id=sandbox_id,
                pid=int(task["Status"].get("ContainerStatus", {}).get("PID") or 0),
                pid_start_time=service_key(service_id),
                port=port,
                host=node.address,
            )
            if not await self.alive(handle):
                return None
            if self.fence is not None:  # on gVisor: on runsc, its node's fence says
                await self.fence.check_runtime(sandbox_id)
            return handle

        return await until_up(
            look,
            within=placement + self.start_timeout,
            interval=0.1,
            late=lambda: (
                f"the agent server did not answer /alive within "
                f"{self.start_timeout:g} s (its task is {state})"
            ),
        )

    def current(
        self, client: docker.DockerClient, service_id: str, earlier: frozenset[str]
    ) -> tuple[dict[str, Any] | None, Node | None]:
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
        service = await self.run(self._find, launch.sandbox_id)
        if service is None:
            return None
        if replicas(service["Spec"]) == 0:
            return await self.run(self._paused_handle, launch.sandbox_id, service)
        try:
            return await self._wait_up(launch.sandbox_id, service["ID"], self.placement_timeout)
        except ProviderError:
            pass
        await self._stop(service["ID"])
        return None

    def _paused_handle(
        self, client: docker.DockerClient, sandbox_id: str, service: dict[str, Any]
    ) -> Handle | None:
        node_id = pinned(service["Spec"])
        ports = service["Spec"].get("EndpointSpec", {}).get("Ports") or []
        found = None if node_id is None else self._node(client, node_id)
        if found is None or not ports or not ports[0].get("PublishedPort"):
            return None
        return Handle(
            sandbox_id=sandbox_id,
            pid=0,
            pid_start_time=service_key(service["ID"]),
            port=int(ports[0]["PublishedPort"]),
            host=found[0].address,
        )

    async def inspect(self, handle: Handle) -> Liveness:
        return (await self.health(handle)).liveness

    async def health(self, handle: Handle) -> Health:
        """The scheduler's view first (the service, its node, its task), then /alive."""
        look, where = await self.run(self._look, handle)
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
                return Health(
                    Liveness.GONE,
                    f"its node {str(node_id)[:12]} left the cluster "
                    "(its workspace was on that node's volume)",
                ), where
            node, attrs = found
            where = node.hostname
            state = str(attrs["Status"]["State"])
            if state in NODE_AWAY and replicas(service["Spec"]) > 0:
                message = attrs["Status"].get("Message") or state
                return Health(
                    Liveness.UNRESPONSIVE, f"its node {where} is {state} ({message})"
                ), where
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
            node_id, settle = None if node is None else node.id, unparked(client, service)

            def change(spec: dict[str, Any]) -> None:
                spec["Mode"] = {"Replicated": {"Replicas": 0}}
                if node_id is not None:
                    pin(spec, node_id)
                spec["EndpointSpec"] = host_port(handle.port)
                settle(spec)  # a claimed parked service resumes as a cold one's

            update(client, service["ID"], change)
            return str(service["ID"])

        await self._stop(await self.run(scale_down))

    async def resume(self, handle: Handle) -> Handle:
        def scale_up(client: docker.DockerClient) -> tuple[str, frozenset[str]]:
            service = self._ours(client, handle)
            earlier = frozenset(t["ID"] for t in self._tasks(client, service["ID"]))
            node_id = pinned(service["Spec"])
            if node_id is not None:
                found = self._node(client, node_id)
                if found is None:
                    raise ProviderError(
                        f"its node {node_id[:12]} left the cluster, and its "
                        "workspace was on that node's volume"
                    )
                node, attrs = found
                state = str(attrs["Status"]["State"])
                availability = str(attrs.get("Spec", {}).get("Availability", "active"))
                if state != "ready" or availability != "active":
                    raise Refused(
                        f"its node {node.hostname} is {state}, {availability}: its "
                        "workspace is on that node's volume; resume it once the node "
                        "is back"
                    )
            update(client, service["ID"], restart)
            return str(service["ID"]), earlier

        service_id, earlier = await self.run(scale_up)
        try:
            return await self._wait_up(
                handle.sandbox_id, service_id, self.placement_timeout, earlier
            )
        except ProviderError as exc:
            # Its port taken on the node meanwhile: once more with a port the node picks.
            if not any(words in str(exc) for words in PORT_TAKEN):
                raise
        earlier = frozenset(t["ID"] for t in await self.run(self._tasks, service_id))

        def republish(spec: dict[str, Any]) -> None:
            publish(None)(spec)
            restart(spec)

        await self.run(lambda c: update(c, service_id, republish))
        return await self._wait_up(handle.sandbox_id, service_id, self.placement_timeout, earlier)

    async def _stop(self, service_id: str) -> None:
        """Scaled to 0 (when it is not yet), until no task of it runs any more; a service
        removed meanwhile (by another control plane's clean-up) has stopped."""

        def scale_down(client: docker.DockerClient) -> bool:
            try:
                update(client, service_id, scale(0))
            except docker.errors.NotFound:
                return False
            return True

        if not await self.run(scale_down):
            return
        deadline = time.monotonic() + self.stop_grace + 30
        while True:
            tasks = await self.run(self._tasks, service_id)
            live = [t for t in tasks if t["Status"]["State"] not in ENDED]
            if not live:
                return
            if time.monotonic() > deadline:
                raise ProviderError(
                    f"the sandbox's task is still {live[0]['Status']['State']} "
                    f"{self.stop_grace + 30:g} s after it was told to stop"
                )
            await anyio.sleep(0.05)

    # -- destroy ----------------------------------------------------------------------------

    async def destroy(self, sandbox_id: str, handle: Handle | None, root_dir: Path) -> Path | None:
        """Stopped, the workspace archived from its volume and the volume removed by jobs on
        its node, then the service and its secret removed. Works from labels alone (a start cut
        short has no handle). Its node down: ProviderError, tried again later."""
        service = await self.run(self._find, sandbox_id)
        archive: Path | None = None
        if service is not None:
            node = await self.run(self._reachable_node, service)
            await self._stop(service["ID"])
            if node is not None:
                archive = await self.run(self._archive, sandbox_id, node)
                await self.run(self._remove_volume, sandbox_id, node)
        await self.run(self._remove_objects, sandbox_id)
        return archive

    def _reachable_node(self, client: docker.DockerClient, service: dict[str, Any]) -> Node | None:
        """The node of the volume, None when there is none (never placed, or the node left the
        cluster); ProviderError while it is down (the clean-up is tried again)."""
        node_id = self._volume_node(client, service)
        if node_id is None:
            return None
        found = self._node(client, node_id)
        if found is None:
            logger.warning(
                "sandbox %s: its node %s left the cluster: its workspace is not archived",
                service["Spec"]["Labels"].get("agent-server.sandbox"),
                node_id[:12],
            )
            return None
        node, attrs = found
        if attrs["Status"]["State"] != "ready":
            raise ProviderError(
                f"its node {node.hostname} is {attrs['Status']['State']}: its "
                "workspace is archived and its volume removed once it is back"
            )
        return node

    def _jobs(self, client: docker.DockerClient, sandbox_id: str) -> Jobs:
        return Jobs(
            client,
            image=self.image,
            labels=self.labels(sandbox_id),
            start_timeout=self.placement_timeout + self.start_timeout,
            node_socket=self.node_socket,
        )

    def _archive(self, client: docker.DockerClient, sandbox_id: str, node: Node) -> Path | None:
        chunks = self._jobs(client, sandbox_id).archive(
            name_of(sandbox_id), node, name_of(sandbox_id)
        )
        return None if chunks is None else self.write_archive(sandbox_id, chunks, compressed=True)

    def _remove_volume(self, client: docker.DockerClient, sandbox_id: str, node: Node) -> None:
        self._jobs(client, sandbox_id).remove_volume(name_of(sandbox_id), node, name_of(sandbox_id))

    async def remove_all(self, sandbox_id: str) -> None:
        """Everything of a sandbox whose start failed, its volume too (nothing to archive)."""
        service = await self.run(self._find, sandbox_id)
        if service is not None:
            node = await self.run(self._reachable_node, service)
            await self._stop(service["ID"])
            if node is not None:
                await self.run(self._remove_volume, sandbox_id, node)
        await self.run(self._remove_objects, sandbox_id)

    def _remove_objects(self, client: docker.DockerClient, sandbox_id: str) -> None:
        """The service, its jobs and its secret (the secret once no service uses it)."""
        for service in api(client).services(filters=self.label_filter(sandbox_id)):
            with contextlib.suppress(docker.errors.NotFound):
                api(client).remove_service(service["ID"])
        self._remove_secrets(client, sandbox_id)

    def _remove_secrets(self, client: docker.DockerClient, sandbox_id: str) -> None:
        for secret in api(client).secrets(filters=self.label_filter(sandbox_id)):
            with contextlib.suppress(docker.errors.NotFound):
                api(client).remove_secret(secret["ID"])
