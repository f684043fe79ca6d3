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

On gVisor (`CONTROL_PLANE_SANDBOX_RUNTIME=runsc`) the nodes run every Swarm task on runsc, their
default runtime (a service cannot name one), and a fence there could not reach the node's
nftables nor its Docker socket. So there the operator runs each node's fence outside Swarm
on runc (`command`, printed by `control-plane node-fence`), no global service is made, and a
sandbox is up only once its node's fence holds it and says its container runs on runsc
(`check_runtime`): a node left on runc, or without a fence, ends the start in ERROR with why.
"""

from __future__ import annotations

import hashlib
import shlex
from typing import Any

import docker
import docker.errors
import docker.types

from control_plane.network.fence import Refusals
from control_plane.network.policy import NetworkPolicy
from control_plane.providers.containers import LABEL_PLANE
from control_plane.providers.swarm.nodejobs import NO_CHECK, api
from control_plane.sandboxes.fences import NodeFences
from control_plane.sandboxes.provider import Handle, ProviderError

LABEL_FENCE = "agent-server.fence"
TOKEN_FILE = "agent-fence-token"
#: Seconds a policy change waits for the sandbox's fence to hold it.
HELD_TIMEOUT = 10.0


class SwarmFence:
    def __init__(
        self,
        fences: NodeFences,
        *,
        image: str,
        plane: str,
        control_plane_url: str,
        network: str,
        constraints: tuple[str, ...],
        node_socket: str,
        upstream: tuple[str, ...],
        runtime: str | None = None,
    ) -> None:
        """`runtime`: the nodes' default runtime every sandbox must run on (None: any);
        with one, the nodes' fences are the operator's (`command`)."""
        self.fences = fences
        self.runtime = runtime
        self.image, self.plane, self.url = image, plane, control_plane_url
        self.network, self.constraints, self.node_socket = network, constraints, node_socket
        self.upstream = upstream
        self.name = f"agent-fence-{plane}"
        #: The token's secret, named after it: a new secret key makes a new secret (and so a
        #: new service), never a fence left with a token nobody takes.
        self.secret_name = f"{self.name}-{hashlib.sha256(fences.token.encode()).hexdigest()[:12]}"

    def ensure(self, client: docker.DockerClient) -> None:
        """The fence service as this control plane would make it: made, or replaced when its
        spec differs (the image, the settings; a new version rolls out to every node); none
        on gVisor, whose nodes' fences the operator runs."""
        labels = {LABEL_PLANE: self.plane, LABEL_FENCE: "true"}
        found = [
            s
            for s in api(client).services(filters={"name": self.name})
            if s["Spec"]["Name"] == self.name
        ]
        if self.runtime is not None:
            for service in found:
                api(client).remove_service(service["ID"])
            return
        secret = self._secret(client, labels)
        template = docker.types.TaskTemplate(
            docker.types.ContainerSpec(
                self.image,
                command=["python", "-m", "control_plane.network.node"],
                user="0:0",
                env=[f"{k}={v}" for k, v in self._env().items()],
                labels=labels,
                mounts=[
                    docker.types.Mount("/var/run/docker.sock", self.node_socket, type="bind"),
                    docker.types.Mount("/tmp", None, type="tmpfs", tmpfs_size=16 * 2**20),
                ],
                secrets=[
                    docker.types.SecretReference(
                        secret, self.secret_name, filename=TOKEN_FILE, uid="0", gid="0", mode=0o400
                    )
                ],
                read_only=True,
                cap_drop=["ALL"],
                cap_add=["CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE"],
                healthcheck=NO_CHECK,
            ),
            restart_policy=docker.types.RestartPolicy("any", delay=1_000_000_000),
            placement=docker.types.Placement(constraints=list(self.constraints)),
            networks=["host"],
        )
        digest = hashlib.sha256(
            repr(
                (self.image, self._env(), self.constraints, self.node_socket, self.secret_name)
            ).encode()
        ).hexdigest()[:16]
        if found and (found[0]["Spec"].get("Labels") or {}).get(LABEL_FENCE) == digest:
            return
        for service in found:
            api(client).remove_service(service["ID"])
        try:
            api(client).create_service(
                template,
                name=self.name,
                labels={**labels, LABEL_FENCE: digest},
                mode=docker.types.ServiceMode("global"),
            )
        except docker.errors.APIError as exc:
            raise ProviderError(
                f"the sandboxes' node fences could not be started: {exc.explanation or exc}"
            ) from None

    def command(self, token_file: str) -> list[str]:
        """The `docker run` an operator gives each gVisor node: the fence as the global service
        runs it, on runc, the token read from `token_file` on the node (root's, 0400)."""
        env = {k: v for k, v in self._env().items() if k != "AGENT_FENCE_NODE"}  # its hostname
        return [
            "docker",
            "run",
            "--detach",
            "--name",
            self.name,
            "--restart",
            "always",
            "--runtime",
            "runc",
            "--network",
            "host",
            "--user",
            "0:0",
            "--read-only",
            "--tmpfs",
            "/tmp:size=16m",
            "--cap-drop",
            "ALL",
            "--cap-add",
            "NET_ADMIN",
            "--cap-add",
            "NET_BIND_SERVICE",
            "--label",
            f"{LABEL_PLANE}={self.plane}",
            "--label",
            f"{LABEL_FENCE}=true",
            "--mount",
            f"type=bind,source={self.node_socket},target=/var/run/docker.sock",
            "--mount",
            f"type=bind,source={token_file},target=/run/secrets/{TOKEN_FILE},readonly",
            *[f"--env={k}={v}" for k, v in env.items()],
            "--entrypoint",
            "python",
            self.image,
            "-m",
            "control_plane.network.node",
        ]

    def shell_command(self, token_file: str) -> str:
        return shlex.join(self.command(token_file))

    async def check_runtime(self, sandbox_id: str) -> None:
        """ProviderError unless the sandbox's node fence holds it, within HELD_TIMEOUT, and
        says its container runs on `runtime` (no-op without one)."""
        if self.runtime is None:
            return
        found = await self.fences.until_reported(sandbox_id, HELD_TIMEOUT)
        if found is None:
            raise ProviderError(
                f"no fence on the sandbox's node held it within {HELD_TIMEOUT:g} s: on gVisor "
                "each node runs its fence outside Swarm (`control-plane node-fence`)"
            )
        if found.runtime != self.runtime:
            raise ProviderError(
                f"the sandbox's node runs it on {found.runtime or 'an unknown runtime'}, not "
                f"{self.runtime}: make {self.runtime} that node's default runtime "
                "(daemon.json), or keep sandboxes off it (CONTROL_PLANE_SWARM_CONSTRAINTS)"
            )

    def _env(self) -> dict[str, str]:
        return {
            "AGENT_FENCE_CONTROL_PLANE": self.url,
            "AGENT_FENCE_NODE": "{{.Node.ID}}",
            "AGENT_FENCE_TOKEN_FILE": f"/run/secrets/{TOKEN_FILE}",
            "AGENT_FENCE_NETWORK": self.network,
            "AGENT_FENCE_LABEL": self.plane,
            "AGENT_FENCE_DNS_UPSTREAM": ",".join(self.upstream),
            "PYTHONUNBUFFERED": "1",
        }

    def _secret(self, client: docker.DockerClient, labels: dict[str, str]) -> str:
        """The token's Docker secret (made once; every control plane of the deployment derives
        the same token)."""
        found = [
            s
            for s in api(client).secrets(filters={"name": self.secret_name})
            if s["Spec"]["Name"] == self.secret_name
        ]
        if found:
            return str(found[0]["ID"])
        made: dict[str, Any] = api(client).create_secret(
            self.secret_name, self.fences.token.encode(), labels=labels
        )
        return str(made["ID"])

    async def set_network(self, handle: Handle, policy: NetworkPolicy) -> bool:
        if not await self.fences.until_held(handle.sandbox_id, policy, HELD_TIMEOUT):
            raise ProviderError(
                f"the fence of the sandbox's node did not take the policy within "
                f"{HELD_TIMEOUT:g} s (it holds it once it is up again)"
            )
        return True

    def refusals(self, sandbox_id: str) -> Refusals | None:
        return self.fences.refusals(sandbox_id)
