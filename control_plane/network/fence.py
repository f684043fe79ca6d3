"""The fence: one segment's nftables table kept as this control plane's sandboxes need it.

It makes the table at start (`rules.skeleton`, with this host's own addresses and networks
blocked besides the ranges every sandbox is denied), lets each sandbox in under its policy,
changes that policy while it runs, lets through what the resolver answered an allowlisted
sandbox, reads what was refused, and lets a sandbox out when it goes.

Which sandbox an address is, it learns from what it admitted, and from the table itself
(its `counters` map names each sandbox by address) for sandboxes another control plane of
the deployment admitted, or this one before a restart: the kernel's table is the truth.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from dataclasses import dataclass

from control_plane.network import host, rules
from control_plane.network.policy import BLOCKED_V4, NetworkPolicy
from control_plane.network.rules import Segment

logger = logging.getLogger(__name__)

#: Seconds between re-reads of the table for an address not known here (a resolver query
#: from a sandbox another control plane started): bounded work for unknown sources.
REREAD_INTERVAL = 1.0
#: Refusals listed for one sandbox at most (the newest first).
MAX_LISTED = 50


@dataclass(frozen=True)
class Refusal:
    """One destination the policy refused, as `recent` remembers it."""

    address: str
    protocol: str
    port: int
    seconds_ago: int
    """Since it was last refused."""


@dataclass(frozen=True)
class Refusals:
    count: int
    """Connections (and datagrams) refused since the sandbox was let in."""
    recent: tuple[Refusal, ...]
    """The distinct ones of the last ten minutes (`rules.RECENT_SECONDS`)."""


class Fence:
    def __init__(self, segment: Segment, *, docker_user: bool = True) -> None:
        """`docker_user`: add the segment's accept rules to Docker's DOCKER-USER chain, so a
        Docker on this host does not drop what the segment forwards (process segments)."""
        self.segment = segment
        self.docker_user = docker_user
        self._sandboxes: dict[ipaddress.IPv4Address, str] = {}
        self._reread_at = 0.0
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """The table made, or refreshed (its sandboxes kept); the sandboxes in it known."""
        blocked = [*BLOCKED_V4, *await host.own_networks(self.segment.interfaces)]
        await host.nft(rules.skeleton(self.segment, blocked))
        await self.heal()
        await self._reread()

    async def heal(self) -> None:
        """What others may undo put back: Docker's DOCKER-USER rules (Docker started after
        this control plane makes the chain anew only when it is missing, which keeps them)."""
        if not self.docker_user:
            return
        try:
            listing = await host.run(
                ["nft", "-j", "list", "chain", "ip", "filter", rules.DOCKER_USER]
            )
        except host.NetworkError:
            listing = ""
        if not rules.has_docker_user_rules(listing, self.segment):
            await host.nft(rules.docker_user(self.segment))

    async def admit(
        self, sandbox_id: str, address: ipaddress.IPv4Address, interface: str, policy: NetworkPolicy
    ) -> None:
        """The sandbox let in under `policy`, or its policy replaced (at once: new
        connections meet it, open ones go on). An address another sandbox held before and did
        not give back is taken from it."""
        script = rules.admit(self.segment, sandbox_id, address, interface, policy)
        try:
            await host.nft(script)
        except host.NetworkError as exc:
            if "File exists" not in str(exc):
                raise
            await self._evict(address, keep=sandbox_id)
            await host.nft(script)
        self._sandboxes[address] = sandbox_id

    async def lift(
        self, sandbox_id: str, address: ipaddress.IPv4Address, policy: NetworkPolicy
    ) -> None:
        """A sandbox admitted under `none` and left so (a parked one) put under `policy`, by
        additions alone (`rules.lift`: no wait for the kernel's grace period)."""
        await host.nft(rules.lift(self.segment, sandbox_id, policy))
        self._sandboxes[address] = sandbox_id

    async def _evict(self, address: ipaddress.IPv4Address, keep: str) -> None:
        """Whatever else the table holds under `address` (a container's address reused by
        Docker for another after a clean-up that did not happen)."""
        for key, verdict in await self._elements("policies"):
            if isinstance(key, list) and key[0] == str(address):
                owner = verdict.removeprefix("s_")
                if owner != keep:
                    await host.nft(rules.release(self.segment, owner, address, str(key[1])))
        for key, counter in await self._elements("counters"):
            owner = str(counter).removeprefix("r_")
            if key == str(address) and owner != keep:
                await host.nft(rules.release(self.segment, owner, address, "-"))

    async def release(
        self, sandbox_id: str, address: ipaddress.IPv4Address, interface: str
    ) -> None:
        """Everything of the sandbox out of the table (idempotent), under whatever addresses
        it holds there."""
        script = rules.release(self.segment, sandbox_id, address, interface)
        try:
            await host.nft(script)
        except host.NetworkError as exc:
            if "Device or resource busy" not in str(exc):
                raise
            # Its chain is still in use: an address of an earlier start of it (one stopped
            # half way, its link gone) still sends there. Those elements go in the same step.
            chain, counter = rules.chain_name(sandbox_id), rules.counter_name(sandbox_id)
            keys = [
                (str(key[0]), str(key[1]))
                for key, verdict in await self._elements("policies")
                if isinstance(key, list) and len(key) == 2 and verdict == chain
            ]
            counted = [
                str(key) for key, name in await self._elements("counters") if name == counter
            ]
            await host.nft(rules.forget(self.segment, keys, counted) + script)
        self._sandboxes.pop(address, None)

    async def admit_resolved(
        self,
        sandbox_id: str,
        addresses: list[ipaddress.IPv4Address],
        ports: tuple[int, ...],
        ttl: int,
    ) -> None:
        await host.nft(rules.admit_resolved(self.segment, sandbox_id, addresses, ports, ttl))

    async def who(self, address: str) -> str | None:
        """The sandbox holding `address` on this segment, or None."""
        try:
            key = ipaddress.IPv4Address(address)
        except ValueError:
            return None
        if key not in self._sandboxes and time.monotonic() >= self._reread_at:
            await self._reread()
        return self._sandboxes.get(key)

    async def address_of(self, sandbox_id: str) -> ipaddress.IPv4Address | None:
        """The address the sandbox was let in under (the table read again when not known
        here), or None."""
        for attempt in range(2):
            for address, owner in self._sandboxes.items():
                if owner == sandbox_id:
                    return address
            if attempt == 0:
                await self._reread()
        return None

    async def _reread(self) -> None:
        async with self._lock:
            self._reread_at = time.monotonic() + REREAD_INTERVAL
            found = {}
            for key, counter in await self._elements("counters"):
                try:
                    found[ipaddress.IPv4Address(str(key))] = str(counter).removeprefix("r_")
                except ValueError:
                    continue
            self._sandboxes = found

    async def _elements(self, name: str) -> list[tuple[object, str]]:
        """A map's elements as (key, value name): a concatenated key as a list of parts."""
        try:
            items = await host.nft_list("map", "inet", self.segment.table, name)
        except host.NetworkError:
            return []
        pairs: list[tuple[object, str]] = []
        for item in items:
            for element in item.get("map", {}).get("elem", []) or []:
                if not isinstance(element, list) or len(element) != 2:
                    continue
                key, value = element
                if isinstance(key, dict) and "concat" in key:
                    key = [str(part) for part in key["concat"]]
                if isinstance(value, dict):  # a verdict: {"goto": {"target": "s_…"}}
                    value = next(
                        iter(v.get("target", "") for v in value.values() if isinstance(v, dict)), ""
                    )
                pairs.append((key, str(value)))
        return pairs

    async def refusals(
        self, sandbox_id: str, address: ipaddress.IPv4Address | None = None
    ) -> Refusals:
        """What the policy refused the sandbox: its count, and what it tried lately.

        Read from one listing of the segment's table: nftables 1.0's `list counter` reads
        every table of the host first (seconds where a host holds many), `list table` this
        one alone."""
        try:
            items = await host.nft_json("list", "table", "inet", self.segment.table)
        except host.NetworkError:
            items = []  # no table (yet, or any more): nothing was refused here
        count, name = 0, rules.counter_name(sandbox_id)
        recent: list[Refusal] = []
        for item in items:
            counter, listed = item.get("counter"), item.get("set")
            if isinstance(counter, dict) and counter.get("name") == name:
                count = int(counter.get("packets", 0))
            elif isinstance(listed, dict) and listed.get("name") == "recent" and address:
                # (RECENT_SIZE elements at most, over all its sandboxes)
                for element in listed.get("elem", []) or []:
                    parts = _parts(element)
                    if parts is not None and parts[0] == str(address):
                        recent.append(Refusal(parts[1], parts[2], int(parts[3]), _age(element)))
        recent.sort(key=lambda r: r.seconds_ago)
        return Refusals(count, tuple(recent[:MAX_LISTED]))

    async def drop(self) -> None:
        """The whole table removed (a test's, or a deployment taken down)."""
        try:
            await host.run(["nft", "delete", "table", "inet", self.segment.table])
        except host.NetworkError:
            pass
        self._sandboxes.clear()


def _age(element: object) -> int:
    """Seconds since a timed element was (last) added: its timeout less what is left of it."""
    if isinstance(element, dict) and isinstance(element.get("elem"), dict):
        timed = element["elem"]
        try:
            return max(int(timed.get("timeout", 0)) - int(timed.get("expires", 0)), 0)
        except (TypeError, ValueError):
            return 0
    return 0


def _parts(element: object) -> list[str] | None:
    """`recent`'s element: [source, destination, protocol, port] (with or without its
    timeout wrapper)."""
    if isinstance(element, dict) and "elem" in element:
        element = element["elem"].get("val") if isinstance(element["elem"], dict) else None
    if isinstance(element, dict) and "concat" in element:
        parts = [str(p) for p in element["concat"]]
        return parts if len(parts) == 4 else None
    return None
