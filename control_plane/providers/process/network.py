"""A process sandbox's network namespace behind the boundary: the process kind's part of it.

Where this control plane can fence its sandboxes (`control_plane.network`), each isolated
process sandbox gets a network namespace of its own, linked to this host: attached before its
server starts (the launcher enters it first, and the sandbox asks the control plane's
resolver for names), detached when the sandbox goes or its start fails, and its address found
again after a restart. The boundary holds the sandbox to its egress policy, changes it while
it runs and says what it refused. A sandbox without a namespace (no boundary here, or one
whose server answers on loopback) has nothing to hold it to, and says so.

What the boundary cannot do becomes a ProviderError here, in the words the sandbox's status
shows.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit, urlunsplit

from control_plane.network.boundary import Boundary
from control_plane.network.fence import Refusals
from control_plane.network.host import NetworkError
from control_plane.network.links import veth_of
from control_plane.network.policy import NetworkPolicy
from control_plane.providers.process.isolation import Command
from control_plane.sandboxes.provider import Handle, ProviderError


class ProcessNetwork:
    """The boundary as the process provider uses it: a namespace and a link per sandbox."""

    def __init__(self, boundary: Boundary) -> None:
        self.boundary = boundary

    async def start(self) -> None:
        await self.boundary.start()

    async def close(self) -> None:
        await self.boundary.close()

    @property
    def gateway(self) -> str:
        """This host's address on the sandboxes' side: all they reach of it."""
        return str(self.boundary.gateway)

    def inside(self, url: str) -> str:
        """Behind the boundary, this control plane is its gateway address on the segment, at
        its own port, whatever address it is known by elsewhere."""
        parts = urlsplit(url)
        netloc = f"{self.boundary.gateway}:{self.boundary.fence.segment.port}"
        return urlunsplit(parts._replace(scheme="http", netloc=netloc))

    async def attach(self, sandbox_id: str, policy: NetworkPolicy) -> ipaddress.IPv4Address:
        """A namespace for the sandbox, let in under `policy`: its address."""
        try:
            return (await self.boundary.attach(sandbox_id, policy)).address
        except NetworkError as exc:
            raise ProviderError(f"the sandbox's network could not be made: {exc}") from None

    async def detach(self, sandbox_id: str) -> None:
        """Its namespace, link and rules gone (idempotent): a start that failed or was cut
        short takes back what it made."""
        await self.boundary.detach(sandbox_id)

    async def remove(self, sandbox_id: str) -> None:
        """`detach` for a sandbox that is destroyed, where a failure is the destroy's."""
        try:
            await self.boundary.detach(sandbox_id)
        except NetworkError as exc:
            raise ProviderError(f"the sandbox's network could not be removed: {exc}") from None

    def resolv_conf(self) -> bytes | None:
        """The sandbox's /etc/resolv.conf: the control plane's resolver (None: no links, the
        host's own)."""
        links = self.boundary.links
        return None if links is None else links.resolv_conf()

    def enter(self, sandbox_id: str, command: Command) -> Command:
        """`command` run in the sandbox's namespace: the launcher enters it first."""
        links = self.boundary.links
        if links is None:
            return command
        return Command([*links.enter(sandbox_id), *command.argv], command.files, command.env)

    async def host_of(self, sandbox_id: str) -> str | None:
        """The address the sandbox's server answers on, found again after a restart: its
        namespace's (None: it has none any more), or loopback where there are no links."""
        links = self.boundary.links
        if links is None:
            return Handle.host
        address = await links.address_of(sandbox_id)
        return None if address is None else str(address)

    async def admit(self, handle: Handle, policy: NetworkPolicy) -> bool:
        """Hold the running (or paused) sandbox to `policy` from now on; False: it has no
        namespace (its server answers on loopback), nothing to hold it to."""
        if handle.host == Handle.host:
            return False
        address = ipaddress.IPv4Address(handle.host)
        try:
            await self.boundary.admit(handle.sandbox_id, address, veth_of(address), policy)
        except NetworkError as exc:
            raise ProviderError(str(exc)) from None
        return True

    async def lift(self, handle: Handle, policy: NetworkPolicy) -> None:
        """`admit` for a sandbox attached under `none` and left so (a parked one, claimed),
        by additions to its rules alone: quicker, as a claim's step should be."""
        try:
            await self.boundary.lift(handle.sandbox_id, ipaddress.IPv4Address(handle.host), policy)
        except NetworkError as exc:
            raise ProviderError(str(exc)) from None

    async def refusals(self, handle: Handle) -> Refusals | None:
        """What its policy refused it (None: it has no namespace)."""
        if handle.host == Handle.host:
            return None
        try:
            return await self.boundary.refusals(
                handle.sandbox_id, ipaddress.IPv4Address(handle.host)
            )
        except NetworkError as exc:
            raise ProviderError(str(exc)) from None
