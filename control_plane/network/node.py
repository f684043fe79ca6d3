"""A swarm node's fence: the network boundary of the sandboxes on one node of a swarm.

    python -m control_plane.network.node     (the swarm provider runs it on every node)

A swarm's sandboxes run on their node's default bridge, in the node's kernel, where a control
plane on another machine sets no rule. So the swarm provider runs this on every node that takes
sandboxes (a global service of the sandbox image: host network, NET_ADMIN, the node's Docker
socket, a token of the deployment's as a Docker secret). It holds the node's bridge as a
segment with the same fence, rules and resolver a control plane holds its own with
(`control_plane.network`), and keeps it in step with the control plane:

- once a second it lists the node's sandbox containers (by their label) and their addresses,
  and posts them, with what each was refused, to `POST /api/v1/network/fences` on the control
  plane; the answer is each one's policy (null: not a live sandbox of the deployment);
- a sandbox new, or whose policy changed, is let in under its policy; one gone is let out; the
  policies it holds are in the next post, so the control plane knows when a change is in force;
- every sandbox of the node asks its resolver (on the bridge's gateway) for names; the
  control plane itself, on its address and port, is reached whatever a policy says.

Its configuration is its environment: AGENT_FENCE_CONTROL_PLANE (the control plane's URL as
nodes reach it), AGENT_FENCE_TOKEN_FILE, AGENT_FENCE_NODE (the node's id), AGENT_FENCE_NETWORK
(the bridge network, `bridge`), AGENT_FENCE_DOCKER_SOCKET, AGENT_FENCE_DNS_UPSTREAM
(comma-separated), AGENT_FENCE_LABEL (the deployment's label value).
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import logging
import os
import signal
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from control_plane.network import host
from control_plane.network.fence import Fence
from control_plane.network.policy import NetworkPolicy
from control_plane.network.resolver import Asker, Resolver
from control_plane.network.rules import Segment

logger = logging.getLogger("agent-fence")

#: Seconds between looks at the node's containers and the control plane's policies.
INTERVAL = 1.0
LABEL_SANDBOX = "agent-server.sandbox"
LABEL_PLANE = "agent-server.control-plane"
BRIDGE_NAME = "com.docker.network.bridge.name"
#: Sandboxes one node reports at most (the control plane refuses more).
MAX_SANDBOXES = 1000


@dataclass(frozen=True)
class Settings:
    control_plane: str
    token: str
    node: str
    network: str
    docker_socket: str
    upstream: tuple[str, ...]
    label: str

    @classmethod
    def from_env(cls) -> Settings:
        with open(os.environ["AGENT_FENCE_TOKEN_FILE"]) as token:
            secret = token.read().strip()
        upstream = os.environ.get("AGENT_FENCE_DNS_UPSTREAM", "")
        return cls(
            control_plane=os.environ["AGENT_FENCE_CONTROL_PLANE"].rstrip("/"),
            token=secret,
            node=os.environ.get("AGENT_FENCE_NODE", socket.gethostname()),
            network=os.environ.get("AGENT_FENCE_NETWORK", "bridge"),
            docker_socket=os.environ.get("AGENT_FENCE_DOCKER_SOCKET", "/var/run/docker.sock"),
            upstream=tuple(u.strip() for u in upstream.split(",") if u.strip()),
            label=os.environ["AGENT_FENCE_LABEL"],
        )


def policy_key(policy: NetworkPolicy) -> str:
    """A short digest of a policy: what the node says it holds, and the control plane checks."""
    return hashlib.sha256(policy.model_dump_json().encode()).hexdigest()[:16]


class NodeFence:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.docker = httpx.AsyncClient(
            base_url="http://docker",
            timeout=10,
            transport=httpx.AsyncHTTPTransport(uds=settings.docker_socket),
        )
        self.plane = httpx.AsyncClient(
            timeout=10, trust_env=False, headers={"Authorization": f"Bearer {settings.token}"}
        )
        self.fence: Fence | None = None
        self.resolver: Resolver | None = None
        #: What is let in: sandbox id -> (address, the policy it holds).
        self.held: dict[str, tuple[ipaddress.IPv4Address, NetworkPolicy]] = {}
        #: Each container's OCI runtime (fixed at its creation), by container id.
        self._runtimes: dict[str, str] = {}
        self._by_address: dict[str, str] = {}

    async def start(self) -> None:
        """The segment of the node's bridge, fenced, and its resolver listening."""
        network = (await self.docker.get(f"/networks/{self.settings.network}")).json()
        ipam = [
            c
            for c in (network.get("IPAM") or {}).get("Config") or []
            if ":" not in str(c.get("Subnet", ""))
        ][0]
        bridge = (network.get("Options") or {}).get(BRIDGE_NAME) or f"br-{network['Id'][:12]}"
        gateway = (
            ipaddress.IPv4Address(ipam["Gateway"])
            if ipam.get("Gateway")
            else await _address_of(bridge)
        )  # the default bridge's is docker0's
        parts = urlsplit(self.settings.control_plane)
        address = socket.getaddrinfo(parts.hostname or "", parts.port or 80, socket.AF_INET)[0]
        segment = Segment(
            tag=f"n{network['Id'][:12]}",
            subnet=ipaddress.IPv4Network(ipam["Subnet"], strict=False),
            gateway=gateway,
            interfaces=bridge,
            port=None,
            masquerade=False,
            control_plane=(
                ipaddress.IPv4Address(address[4][0]),
                parts.port or (443 if parts.scheme == "https" else 80),
            ),
        )
        self.fence = Fence(segment, docker_user=False)
        await self.fence.start()
        self.resolver = Resolver(self._asker, self._admit, self.settings.upstream)
        await self.resolver.listen(str(gateway), 53)
        logger.info("fencing %s (%s) on node %s", bridge, segment.subnet, self.settings.node)

    async def run(self) -> None:
        await self.start()
        while True:
            try:
                await self.sync()
            except (httpx.HTTPError, host.NetworkError, ValueError, KeyError) as exc:
                logger.warning("could not bring the fence in step: %s", exc)
            await asyncio.sleep(INTERVAL)

    async def sync(self) -> None:
        """One round: the node's sandboxes as they are, posted; the answer held."""
        assert self.fence is not None
        found = await self._containers()
        report: dict[str, Any] = {}
        for sandbox_id, (address, runtime) in found.items():
            refusals = await self.fence.refusals(sandbox_id, address)
            held = self.held.get(sandbox_id)
            report[sandbox_id] = {
                "address": str(address),
                "refused": refusals.count,
                "recent": [vars(r) for r in refusals.recent],
                "holds": policy_key(held[1]) if held and held[0] == address else None,
                "runtime": runtime,
            }
        answer = await self.plane.post(
            f"{self.settings.control_plane}/api/v1/network/fences",
            json={"node": self.settings.node, "sandboxes": report},
        )
        answer.raise_for_status()
        policies = answer.json().get("policies", {})
        for sandbox_id, (address, _) in found.items():
            given = policies.get(sandbox_id)
            if given is None:
                await self._release(sandbox_id)
                continue
            policy = NetworkPolicy.model_validate(given)
            if self.held.get(sandbox_id) != (address, policy):
                await self._release(sandbox_id)
                await self.fence.admit(sandbox_id, address, self.fence.segment.interfaces, policy)
                self.held[sandbox_id] = (address, policy)
                self._by_address[str(address)] = sandbox_id
        for gone in set(self.held) - set(found):
            await self._release(gone)

    async def _release(self, sandbox_id: str) -> None:
        assert self.fence is not None
        held = self.held.pop(sandbox_id, None)
        if held is not None:
            self._by_address.pop(str(held[0]), None)
            await self.fence.release(sandbox_id, held[0], self.fence.segment.interfaces)

    async def _containers(self) -> dict[str, tuple[ipaddress.IPv4Address, str | None]]:
        """The node's running sandbox containers of this deployment, by sandbox id: each one's
        address and OCI runtime (what the control plane checks a gVisor deployment's by)."""
        filters = json.dumps(
            {
                "label": [f"{LABEL_PLANE}={self.settings.label}", LABEL_SANDBOX],
                "status": ["running"],
            }
        )
        listed = (await self.docker.get("/containers/json", params={"filters": filters})).json()
        found: dict[str, tuple[ipaddress.IPv4Address, str | None]] = {}
        ids = {str(c.get("Id")) for c in listed[:MAX_SANDBOXES]}
        self._runtimes = {k: v for k, v in self._runtimes.items() if k in ids}
        for container in listed[:MAX_SANDBOXES]:
            sandbox_id = (container.get("Labels") or {}).get(LABEL_SANDBOX)
            networks = (container.get("NetworkSettings") or {}).get("Networks") or {}
            address = (networks.get(self.settings.network) or {}).get("IPAddress")
            if sandbox_id and address:
                found[sandbox_id] = (
                    ipaddress.IPv4Address(address),
                    await self._runtime(str(container.get("Id"))),
                )
        return found

    async def _runtime(self, container_id: str) -> str | None:
        """The container's runtime, asked once (the listing does not say it)."""
        if container_id not in self._runtimes:
            answer = await self.docker.get(f"/containers/{container_id}/json")
            if answer.status_code != 200:
                return None
            runtime = (answer.json().get("HostConfig") or {}).get("Runtime")
            if not isinstance(runtime, str):
                return None
            self._runtimes[container_id] = runtime
        return self._runtimes[container_id]

    async def _asker(self, source: str) -> Asker | None:
        sandbox_id = self._by_address.get(source)
        held = self.held.get(sandbox_id) if sandbox_id else None
        return None if sandbox_id is None or held is None else Asker(sandbox_id, held[1])

    async def _admit(
        self,
        asker: Asker,
        source: str,
        addresses: list[ipaddress.IPv4Address],
        ports: tuple[int, ...],
        ttl: int,
    ) -> None:
        assert self.fence is not None
        await self.fence.admit_resolved(asker.sandbox_id, addresses, ports, ttl)


async def _address_of(interface: str) -> ipaddress.IPv4Address:
    for link in await host.ip_json("-4", "addr", "show", "dev", interface):
        for info in link.get("addr_info", []):
            return ipaddress.IPv4Address(str(info["local"]))
    raise ValueError(f"{interface} has no IPv4 address")


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request, twice a second
    if host.missing_tools():
        raise SystemExit(f"agent-fence: install {', '.join(host.missing_tools())}")
    asyncio.run(_serve(Settings.from_env()))


async def _serve(settings: Settings) -> None:
    """Until told to stop: SIGTERM (a removed or replaced fence service) ends it at once.
    As pid 1 of its container it would otherwise ignore the signal and go on answering its
    sandboxes' names from what it last knew until Docker kills it, beside the fence that
    replaces it on the same port. Its rules stay in the table for the next fence."""
    work = asyncio.current_task()
    assert work is not None
    loop = asyncio.get_running_loop()
    for stop in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(stop, work.cancel)
    try:
        await NodeFence(settings).run()
    except asyncio.CancelledError:
        logger.info("stopped; the table keeps its rules for the next fence")


if __name__ == "__main__":
    main()
