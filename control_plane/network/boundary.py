"""The boundary: what a provider asks of the network for its sandboxes on this host.

It holds the segment's fence (nftables), the links of process sandboxes (namespaces and veth
pairs; none for containers, whose network Docker makes) and the resolver the sandboxes ask
for names, and starts and closes them with the control plane. A provider lets a sandbox in
(`attach` for a process, `admit` for a container Docker has addressed), changes its policy
while it runs, asks what was refused, and lets it out when it goes.

The policy of a sandbox this process did not let in (another control plane of the deployment
did, or this one before a restart) is read through `policy_of` (its row), when the resolver
first hears from it.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from control_plane.network.fence import Fence, Refusals
from control_plane.network.links import Attached, Links, veth_of
from control_plane.network.policy import NetworkPolicy
from control_plane.network.resolver import Asker, Resolver

logger = logging.getLogger(__name__)

PolicyOf = Callable[[str], Awaitable[NetworkPolicy | None]]
#: Policies remembered here (the rest are read again through `policy_of`), and for how long:
#: another control plane of the deployment may change one, and its resolver must follow.
MAX_REMEMBERED = 10_000
REMEMBERED_SECONDS = 5.0


class Boundary:
    def __init__(
        self,
        fence: Fence,
        links: Links | None,
        *,
        policy_of: PolicyOf,
        upstream: Sequence[str] = (),
        dns_port: int = 53,
    ) -> None:
        self.fence = fence
        self.links = links
        self.policy_of = policy_of
        self.dns_port = dns_port
        self.resolver = Resolver(self._asker, self._admit, upstream, refuse=self._refused)
        self._policies: dict[str, tuple[NetworkPolicy, float]] = {}

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        """This host's address on the sandboxes' side (the control plane and its resolver)."""
        return self.fence.segment.gateway

    async def start(self) -> None:
        if self.links is not None:
            await self.links.prepare()
        await self.fence.start()
        await self.resolver.listen(str(self.gateway), self.dns_port)

    async def close(self) -> None:
        await self.resolver.close()

    # -- process sandboxes: a namespace and a link each -------------------------------------

    async def attach(self, sandbox_id: str, policy: NetworkPolicy) -> Attached:
        """A namespace for the sandbox, linked to this host and let in under `policy`.

        What an earlier start of it left (a control plane stopped half way through it, or
        before the sandbox was removed) goes first, its rules with it: the new link has
        another address, and rules left under the old one would keep the sandbox's chain in
        use. A start stopped during its admission takes back what `nft` may have applied."""
        assert self.links is not None, "attach is for process sandboxes"
        if self.links.has(sandbox_id):
            await self.detach(sandbox_id)
        attached = await self.links.attach(sandbox_id)
        try:
            await self.admit(sandbox_id, attached.address, attached.interface, policy)
        except BaseException:
            await self.release(sandbox_id, attached.address, attached.interface)
            await self.links.detach(sandbox_id, attached.address)
            raise
        return attached

    async def detach(self, sandbox_id: str) -> None:
        """Its rules, link and namespace gone (idempotent): the rules under the address its
        namespace has, or else the one the table knows it by (the link of that one is left
        alone: the address may be another sandbox's by now)."""
        assert self.links is not None
        address = await self.links.address_of(sandbox_id)
        ruled = address or await self.fence.address_of(sandbox_id)
        if ruled is not None:
            await self.release(sandbox_id, ruled, veth_of(ruled))
        await self.links.detach(sandbox_id, address)

    # -- any sandbox with an address on the segment ------------------------------------------

    async def admit(
        self, sandbox_id: str, address: ipaddress.IPv4Address, interface: str, policy: NetworkPolicy
    ) -> None:
        """Let in under `policy`, or its policy replaced at once."""
        await self.fence.admit(sandbox_id, address, interface, policy)
        self._remember(sandbox_id, policy)

    async def lift(
        self, sandbox_id: str, address: ipaddress.IPv4Address, policy: NetworkPolicy
    ) -> None:
        """A sandbox admitted under `none` and left so (a parked one) put under `policy`."""
        await self.fence.lift(sandbox_id, address, policy)
        self._remember(sandbox_id, policy)

    async def release(
        self, sandbox_id: str, address: ipaddress.IPv4Address, interface: str
    ) -> None:
        await self.fence.release(sandbox_id, address, interface)
        self._policies.pop(sandbox_id, None)

    async def refusals(self, sandbox_id: str, address: ipaddress.IPv4Address | None) -> Refusals:
        return await self.fence.refusals(sandbox_id, address)

    def _remember(self, sandbox_id: str, policy: NetworkPolicy) -> None:
        self._policies.pop(sandbox_id, None)
        if len(self._policies) >= MAX_REMEMBERED:
            self._policies.pop(next(iter(self._policies)))
        self._policies[sandbox_id] = (policy, time.monotonic() + REMEMBERED_SECONDS)

    # -- the resolver's questions -------------------------------------------------------------

    async def _asker(self, source: str) -> Asker | None:
        sandbox_id = await self.fence.who(source)
        if sandbox_id is None:
            return None
        policy, until = self._policies.get(sandbox_id, (None, 0.0))
        if policy is None or time.monotonic() > until:
            policy = await self.policy_of(sandbox_id)
            if policy is None:
                return None
            self._remember(sandbox_id, policy)
        return Asker(sandbox_id, policy)

    async def _admit(
        self,
        asker: Asker,
        source: str,
        addresses: list[ipaddress.IPv4Address],
        ports: tuple[int, ...],
        ttl: int,
    ) -> None:
        await self.fence.admit_resolved(asker.sandbox_id, addresses, ports, ttl)

    def _refused(self, asker: Asker, name: str, why: str) -> None:
        logger.debug("sandbox %s: name %s refused (%s)", asker.sandbox_id, name, why)
