"""The Swarm provider's network boundary: a fence on every node that takes sandboxes.

A swarm's sandboxes run in their nodes' kernels, where no rule of a control plane on another
machine reaches. So the provider runs the node fence (`control_plane.network.node`, from the
sandbox image) as a global service on the nodes its sandboxes may be placed on: host network
(the node's bridge and firewall are the node's), NET_ADMIN (for nftables), the node's Docker
socket (to list its sandbox containers and their addresses), and the deployment's fence token
as a Docker secret. Each fence holds its node's sandboxes to their policies, answers their
names, and reports what they were refused (`fences.NodeFences`); a policy change returns once
the sandbox's fence holds it.

Made (or brought to the image and settings of this control plane) when the provider starts;
left running when it stops, as sandboxes are. What it cannot do: it fences the nodes' default
bridge (`CONTROL_PLANE_SWARM_NETWORK=bridge`), not a swarm-scoped network; a policy change
reaches a node within its next round (a second), and the PATCH waits for it (up to
`HELD_TIMEOUT`); refusals are read from the fences' last reports, which each control plane of
the deployment receives in turn.
"""

from __future__ import annotations

import hashlib
from typing import Any

import docker
import docker.errors
import docker.types

from control_plane.network.fence import Refusals
from control_plane.network.policy import NetworkPolicy
from control_plane.sandboxes.containers import LABEL_PLANE
from control_plane.sandboxes.fences import NodeFences
from control_plane.sandboxes.nodejobs import NO_CHECK, api
from control_plane.sandboxes.provider import Handle, ProviderError

LABEL_FENCE = "agent-server.fence"
TOKEN_FILE = "agent-fence-token"
#: Seconds a policy change waits for the sandbox's fence to hold it.
HELD_TIMEOUT = 10.0


class SwarmFence:
    def __init__(self, fences: NodeFences, *, image: str, plane: str, control_plane_url: str,
                 network: str, constraints: tuple[str, ...], node_socket: str,
                 upstream: tuple[str, ...]) -> None:
        self.fences = fences
        self.image, self.plane, self.url = image, plane, control_plane_url
        self.network, self.constraints, self.node_socket = network, constraints, node_socket
        self.upstream = upstream
        self.name = f"agent-fence-{plane}"
        #: The token's secret, named after it: a new secret key makes a new secret (and so a
        #: new service), never a fence left with a token nobody takes.
        self.secret_name = (f"{self.name}-"
                            f"{hashlib.sha256(fences.token.encode()).hexdigest()[:12]}")

    def ensure(self, client: docker.DockerClient) -> None:
        """The fence service as this control plane would make it: made, or replaced when its
        spec differs (the image, the settings; a new version rolls out to every node)."""
        labels = {LABEL_PLANE: self.plane, LABEL_FENCE: "true"}
        secret = self._secret(client, labels)
        template = docker.types.TaskTemplate(
            docker.types.ContainerSpec(
                self.image, command=["python", "-m", "control_plane.network.node"],
                user="0:0", env=[f"{k}={v}" for k, v in self._env().items()], labels=labels,
                mounts=[docker.types.Mount("/var/run/docker.sock", self.node_socket,
                                           type="bind"),
                        docker.types.Mount("/tmp", None, type="tmpfs", tmpfs_size=16 * 2**20)],
                secrets=[docker.types.SecretReference(secret, self.secret_name, filename=TOKEN_FILE,
                                                      uid="0", gid="0", mode=0o400)],
                read_only=True, cap_drop=["ALL"], cap_add=["CAP_NET_ADMIN",
                                                           "CAP_NET_BIND_SERVICE"],
                healthcheck=NO_CHECK),
            restart_policy=docker.types.RestartPolicy("any", delay=1_000_000_000),
            placement=docker.types.Placement(constraints=list(self.constraints)),
            networks=["host"])
        digest = hashlib.sha256(repr((self.image, self._env(), self.constraints,
                                      self.node_socket, self.secret_name)).encode()).hexdigest()[:16]
        found = [s for s in api(client).services(filters={"name": self.name})
                 if s["Spec"]["Name"] == self.name]
        if found and (found[0]["Spec"].get("Labels") or {}).get(LABEL_FENCE) == digest:
            return
        for service in found:
            api(client).remove_service(service["ID"])
        try:
            api(client).create_service(template, name=self.name,
                                       labels={**labels, LABEL_FENCE: digest},
                                       mode=docker.types.ServiceMode("global"))
        except docker.errors.APIError as exc:
            raise ProviderError(f"the sandboxes' node fences could not be started: "
                                f"{exc.explanation or exc}") from None

    def _env(self) -> dict[str, str]:
        return {"AGENT_FENCE_CONTROL_PLANE": self.url, "AGENT_FENCE_NODE": "{{.Node.ID}}",
                "AGENT_FENCE_TOKEN_FILE": f"/run/secrets/{TOKEN_FILE}",
                "AGENT_FENCE_NETWORK": self.network, "AGENT_FENCE_LABEL": self.plane,
                "AGENT_FENCE_DNS_UPSTREAM": ",".join(self.upstream),
                "PYTHONUNBUFFERED": "1"}

    def _secret(self, client: docker.DockerClient, labels: dict[str, str]) -> str:
        """The token's Docker secret (made once; every control plane of the deployment derives
        the same token)."""
        found = [s for s in api(client).secrets(filters={"name": self.secret_name})
                 if s["Spec"]["Name"] == self.secret_name]
        if found:
            return str(found[0]["ID"])
        made: dict[str, Any] = api(client).create_secret(
            self.secret_name, self.fences.token.encode(), labels=labels)
        return str(made["ID"])

    async def set_network(self, handle: Handle, policy: NetworkPolicy) -> bool:
        if not await self.fences.until_held(handle.sandbox_id, policy, HELD_TIMEOUT):
            raise ProviderError(f"the fence of the sandbox's node did not take the policy within "
                                f"{HELD_TIMEOUT:g} s (it holds it once it is up again)")
        return True

    def refusals(self, sandbox_id: str) -> Refusals | None:
        return self.fences.refusals(sandbox_id)
