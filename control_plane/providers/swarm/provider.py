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
  and the published port, stored in its handle, whose ref is the service's id (which tells
  it from another service of the same name: `spec.refers_to`);
- runs on its node's default bridge (`Config.swarm_network`), whose daemon keeps containers
  apart (`"icc": false` on every node that takes sandboxes, README);
- gets its session key in a Docker secret, runs hardened with the limits, reservations and
  placement constraints of the settings (`spec`: its spec); a parked one (`pool`, for a
  warm pool that wraps the provider: `providers.pool.Pooled`) is made in advance and gets its
  keys over its port when a start claims it;
- is RUNNING once `/alive` answers on its node's address (on gVisor, and once its node's fence
  holds it and says it runs on runsc: `fence`); `startup` waits for that.

Swarm cannot freeze a service, so a pause stops it: the service is scaled to 0, pinned to its
node (`node.id==`) with its published port fixed; its volume stays on the node. The agent server
stops as on any shutdown (its log and workspace are on the volume; runs the pause interrupted
go on after the resume); shells and processes the agent left running end. Resume scales it
back to 1 on that node. A resume is refused while that node is down or drained (`Refused`: the
sandbox stays PAUSED), and the sandbox is MISSING once the node has left the cluster.

Destroy stops the service, then two short jobs on its node (`nodejobs`) archive the workspace
from the volume and remove the volume; then the service and its secrets go. While the node is
down this fails and the clean-up is tried again later; once the node has left the cluster
there is nothing left to reach.

The provider is that lifecycle and nothing more: its settings are one frozen value
(`settings`), the JSON it sends and reads is built and parsed without a call (`spec`), the
calls on the manager are `manager`'s, and the wait for a service coming up is `startup`'s.
"""

from __future__ import annotations

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
from control_plane.providers.containers import name_of
from control_plane.providers.swarm import manager
from control_plane.providers.swarm.fence import SwarmFence
from control_plane.providers.swarm.nodejobs import ENDED, Jobs, Node, describe, host_port
from control_plane.providers.swarm.pool import SwarmParking
from control_plane.providers.swarm.settings import SwarmSettings
from control_plane.providers.swarm.spec import (
    NODE_AWAY,
    PORT_TAKEN,
    SPEC,
    newest,
    pin,
    pinned,
    publish,
    refers_to,
    replicas,
    restart,
    scale,
)
from control_plane.providers.swarm.startup import Startup
from control_plane.sandboxes.provider import (
    Handle,
    Health,
    Launch,
    Liveness,
    ProviderError,
    Refused,
)

logger = logging.getLogger(__name__)


class SwarmProvider(SwarmParking):
    """Sandboxes as one-replica services on a swarm: their lifecycle, from the manager's view
    and each agent server's /alive (the module says how each move is made)."""

    spec = SPEC

    def __init__(
        self,
        settings: SwarmSettings,
        *,
        fence: SwarmFence | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`fence`: the nodes' network boundary (`fence`; None: the nodes' bridges alone);
        `transport`: a test's for the agent servers' HTTP."""
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
        self.startup = Startup(self, settings, fence)

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
        """The sandbox's service, found by this deployment's labels."""
        return manager.find(client, sandbox_id, self.labels(sandbox_id))

    def _ours(self, client: docker.DockerClient, handle: Handle) -> dict[str, Any]:
        """The handle's service; ProviderError when it is gone, or is another of its name."""
        service = self._find(client, handle.sandbox_id)
        if service is None or not refers_to(handle.ref, service["ID"]):
            raise ProviderError("the sandbox's service is gone")
        return service

    # -- create ------------------------------------------------------------------------------

    # (`create` is `parking.Parking`'s: these three steps in a row, a pool's claim between.)

    async def prepare(self, launch: Launch) -> None:
        self.check_spec(launch)

    async def start_cold(self, launch: Launch) -> str:
        if await self.run(self._find, launch.sandbox_id) is not None:
            await self.remove_all(launch.sandbox_id)  # a start cut short: replaced
        labels = self.labels(launch.sandbox_id)
        return await self.run(manager.start_service, self.settings, launch, labels)

    async def until_started(self, launch: Launch, service_id: str) -> Handle:
        try:
            return await self.startup.until_up(launch.sandbox_id, service_id)
        except BaseException:
            with anyio.CancelScope(shield=True):  # a failed start leaves nothing on any node
                try:
                    await self.remove_all(launch.sandbox_id)
                except ProviderError as exc:  # its remains go with the sandbox's clean-up
                    logger.warning(
                        "sandbox %s: removing a failed start: %s", launch.sandbox_id, exc
                    )
            raise

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
            return await self.startup.until_up(launch.sandbox_id, service["ID"])
        except ProviderError:
            pass
        await self._stop(service["ID"])
        return None

    @staticmethod
    def _paused_handle(
        client: docker.DockerClient, sandbox_id: str, service: dict[str, Any]
    ) -> Handle | None:
        """A paused service's handle: its pinned node's address and its fixed port."""
        node_id = pinned(service["Spec"])
        ports = service["Spec"].get("EndpointSpec", {}).get("Ports") or []
        found = None if node_id is None else manager.node(client, node_id)
        if found is None or not ports or not ports[0].get("PublishedPort"):
            return None
        return Handle(
            sandbox_id=sandbox_id,
            ref=str(service["ID"]),
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
        if service is None or not refers_to(handle.ref, service["ID"]):
            return Health(Liveness.GONE, "its service was removed"), ""
        task = newest(manager.tasks(client, service["ID"]))
        node_id = pinned(service["Spec"]) or (task or {}).get("NodeID")
        where = "its node"
        if node_id:
            found = manager.node(client, str(node_id))
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
            node = manager.reachable_node(client, service)  # down: it cannot be told to stop
            node_id = None if node is None else node.id
            settle = manager.unparked(client, service)

            def change(spec: dict[str, Any]) -> None:
                spec["Mode"] = {"Replicated": {"Replicas": 0}}
                if node_id is not None:
                    pin(spec, node_id)
                spec["EndpointSpec"] = host_port(handle.port)
                settle(spec)  # a claimed parked service resumes as a cold one's

            manager.update(client, service["ID"], change)
            return str(service["ID"])

        await self._stop(await self.run(scale_down))

    async def resume(self, handle: Handle) -> Handle:
        """Scaled back to 1 on the node it is pinned to; Refused while that node is down or
        drained, ProviderError once it has left the cluster. Its port taken there meanwhile,
        once more on a port the node picks."""

        def scale_up(client: docker.DockerClient) -> tuple[str, frozenset[str]]:
            service = self._ours(client, handle)
            earlier = frozenset(t["ID"] for t in manager.tasks(client, service["ID"]))
            node_id = pinned(service["Spec"])
            if node_id is not None:
                found = manager.node(client, node_id)
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
            manager.update(client, service["ID"], restart)
            return str(service["ID"]), earlier

        service_id, earlier = await self.run(scale_up)
        try:
            return await self.startup.until_up(handle.sandbox_id, service_id, earlier)
        except ProviderError as exc:
            # Its port taken on the node meanwhile: once more with a port the node picks.
            if not any(words in str(exc) for words in PORT_TAKEN):
                raise
        earlier = frozenset(t["ID"] for t in await self.run(manager.tasks, service_id))

        def republish(spec: dict[str, Any]) -> None:
            publish(None)(spec)
            restart(spec)

        await self.run(lambda c: manager.update(c, service_id, republish))
        return await self.startup.until_up(handle.sandbox_id, service_id, earlier)

    async def _stop(self, service_id: str) -> None:
        """Scaled to 0 (when it is not yet), until no task of it runs any more; a service
        removed meanwhile (by another control plane's clean-up) has stopped."""

        def scale_down(client: docker.DockerClient) -> bool:
            try:
                manager.update(client, service_id, scale(0))
            except docker.errors.NotFound:
                return False
            return True

        if not await self.run(scale_down):
            return
        deadline = time.monotonic() + self.stop_grace + 30
        while True:
            tasks = await self.run(manager.tasks, service_id)
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
            node = await self.run(manager.reachable_node, service)
            await self._stop(service["ID"])
            if node is not None:
                archive = await self.run(self._archive, sandbox_id, node)
                await self.run(self._remove_volume, sandbox_id, node)
        await self.run(manager.remove_objects, self.labels(sandbox_id))
        return archive

    async def remove_all(self, sandbox_id: str) -> None:
        """Everything of a sandbox whose start failed, its volume too (nothing to archive)."""
        service = await self.run(self._find, sandbox_id)
        if service is not None:
            node = await self.run(manager.reachable_node, service)
            await self._stop(service["ID"])
            if node is not None:
                await self.run(self._remove_volume, sandbox_id, node)
        await self.run(manager.remove_objects, self.labels(sandbox_id))

    def _jobs(self, client: docker.DockerClient, sandbox_id: str) -> Jobs:
        """The short jobs on a sandbox's node, labelled as its service is."""
        return Jobs(
            client,
            image=self.image,
            labels=self.labels(sandbox_id),
            start_timeout=self.settings.placement_timeout + self.start_timeout,
            node_socket=self.settings.node_socket,
        )

    def _archive(self, client: docker.DockerClient, sandbox_id: str, node: Node) -> Path | None:
        name = name_of(sandbox_id)
        chunks = self._jobs(client, sandbox_id).archive(name, node, name)
        return None if chunks is None else self.write_archive(sandbox_id, chunks, compressed=True)

    def _remove_volume(self, client: docker.DockerClient, sandbox_id: str, node: Node) -> None:
        name = name_of(sandbox_id)
        self._jobs(client, sandbox_id).remove_volume(name, node, name)
