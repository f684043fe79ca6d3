"""The Docker provider's network boundary: its bridge network as a segment of this host.

Docker makes the network (a bridge without inter-container traffic), gives each container
its address and masquerades what leaves; the fence (`control_plane.network`) holds each
container to its sandbox's policy by that address on that bridge, in a table of its own
that Docker's tables leave alone. A container's traffic beyond this host is refused until its
sandbox is let in (so a warm pool's parked container, which belongs to no one yet, reaches
nothing); to this host it reaches only the bridge's gateway, there only the control plane's
port and the resolver. Containers ask that resolver for names: Docker's embedded DNS server
forwards their queries to it from their own address, so each is answered by its policy.

What this cannot do: the rules live on this host, so they hold containers of this host's
daemon only (a remote daemon's containers are not fenced: `CONTROL_PLANE_DOCKER_URL`
pointing elsewhere gets a warning); a container Docker gives an address that another
sandbox's container left takes that address's place in the table when it is let in.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Callable
from typing import Any

from control_plane.network.boundary import Boundary
from control_plane.network.fence import Refusals
from control_plane.network.host import NetworkError
from control_plane.network.policy import NetworkPolicy
from control_plane.network.rules import Segment
from control_plane.sandboxes.provider import ProviderError

logger = logging.getLogger(__name__)

BRIDGE_NAME = "com.docker.network.bridge.name"
#: Makes a segment's boundary (the composition root knows the policies' store and resolvers).
BoundaryFor = Callable[[Segment], Boundary]


def segment_of(network: dict[str, Any], port: int) -> Segment:
    """The segment of a Docker bridge network (`docker network inspect`'s attributes)."""
    config = (network.get("IPAM") or {}).get("Config") or []
    ipv4 = [c for c in config if ":" not in str(c.get("Subnet", ""))]
    if not ipv4 or not ipv4[0].get("Gateway"):
        raise ProviderError(
            f"the Docker network {network.get('Name')!r} has no IPv4 subnet and gateway"
        )
    network_id = str(network["Id"])
    bridge = (network.get("Options") or {}).get(BRIDGE_NAME) or f"br-{network_id[:12]}"
    return Segment(
        tag=f"d{network_id[:12]}",
        subnet=ipaddress.IPv4Network(ipv4[0]["Subnet"], strict=False),
        gateway=ipaddress.IPv4Address(ipv4[0]["Gateway"]),
        interfaces=bridge,
        port=port,
        masquerade=False,
    )


def address_of(container: dict[str, Any], network: str) -> ipaddress.IPv4Address | None:
    """A container's address on `network` (`docker inspect`'s attributes)."""
    networks = (container.get("NetworkSettings") or {}).get("Networks") or {}
    text = (networks.get(network) or {}).get("IPAddress")
    return ipaddress.IPv4Address(text) if text else None


class DockerNetwork:
    """The boundary of the provider's bridge network, made once that network is known."""

    def __init__(self, boundary_for: BoundaryFor, port: int) -> None:
        self.boundary_for = boundary_for
        self.port = port
        self.boundary: Boundary | None = None
        self._lock = asyncio.Lock()

    @property
    def gateway(self) -> str | None:
        return None if self.boundary is None else str(self.boundary.gateway)

    async def ensure(self, network: dict[str, Any]) -> Boundary:
        """The boundary of `network`, started the first time."""
        async with self._lock:
            if self.boundary is None:
                boundary = self.boundary_for(segment_of(network, self.port))
                try:
                    await boundary.start()
                except NetworkError as exc:
                    await boundary.close()
                    raise ProviderError(
                        f"the sandboxes' network boundary could not be made "
                        f"on Docker's network: {exc}"
                    ) from None
                self.boundary = boundary
            return self.boundary

    async def admit(
        self, sandbox_id: str, address: ipaddress.IPv4Address, policy: NetworkPolicy
    ) -> None:
        boundary = self._ready()
        try:
            await boundary.admit(sandbox_id, address, boundary.fence.segment.interfaces, policy)
        except NetworkError as exc:
            raise ProviderError(f"the sandbox's network rules could not be set: {exc}") from None

    async def release(self, sandbox_id: str) -> None:
        if self.boundary is None:
            return
        address = await self.boundary.fence.address_of(sandbox_id)
        if address is None:
            return
        try:
            await self.boundary.release(sandbox_id, address, self.boundary.fence.segment.interfaces)
        except NetworkError as exc:
            raise ProviderError(
                f"the sandbox's network rules could not be removed: {exc}"
            ) from None

    async def refusals(self, sandbox_id: str) -> Refusals | None:
        """What the fence refused the sandbox lately; None while the boundary is not up."""
        if self.boundary is None:
            return None
        fence = self.boundary.fence
        try:
            return await fence.refusals(sandbox_id, await fence.address_of(sandbox_id))
        except NetworkError as exc:
            raise ProviderError(str(exc)) from None

    def _ready(self) -> Boundary:
        if self.boundary is None:
            raise ProviderError("the sandboxes' network boundary is not up (Docker unreachable)")
        return self.boundary

    async def close(self) -> None:
        if self.boundary is not None:
            await self.boundary.close()
