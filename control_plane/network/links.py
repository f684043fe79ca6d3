"""Process sandboxes' links to this host: a network namespace and a veth pair each.

The segment is a subnet of this host's choosing (`CONTROL_PLANE_SANDBOX_SUBNET`). Its first
address, the gateway, is this host's on the sandboxes' side: held by a bridge without ports
(`asgw…`; this kernel has no dummy device), so the control plane's sandbox-side listener and
resolver can bind it before any sandbox exists. The rest of the subnet is unreachable from
this host but through a sandbox's own route, so a packet for an address no sandbox holds
fails here instead of leaving by the default route.

A sandbox gets a namespace named after it (`as-<sandbox id>`, under /run/netns: it outlives
the control plane, and a restarted one finds it by name) and one address of the subnet. Its
end of the veth pair is `eth0` there, with that address and a default route to the gateway;
this host's end is `asbx<address in hex>` with a route to that address alone. Neither end has
an IPv6 address (not even a link-local one), so nothing of IPv6 crosses. Routed, not bridged:
sandboxes share no link, and everything between them goes through this host's rules.

An address is claimed by adding its route first: the kernel refuses a second, so two control
planes (or two starts) never hand out one address twice, without a lock.
"""

from __future__ import annotations

import ipaddress
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from control_plane.network.host import NetworkError, ip_batch, ip_json, run

NETNS_PREFIX = "as-"
NETNS_DIR = Path("/run/netns")
VETH_PREFIX = "asbx"
HOLDER_PREFIX = "asgw"
INSIDE = "eth0"
#: Tries at a free address before giving up (each a kernel-checked claim).
CLAIM_TRIES = 64
#: What `ip` says when what is removed is gone already.
GONE = ("Cannot find device", "No such file or directory", "No such process")


@dataclass(frozen=True)
class Attached:
    """A sandbox's place on the segment."""

    netns: Path
    """Its namespace, for `nsenter --net=`."""
    address: ipaddress.IPv4Address
    interface: str
    """This host's end of its veth pair."""


def veth_of(address: ipaddress.IPv4Address) -> str:
    return f"{VETH_PREFIX}{int(address):08x}"


def netns_of(sandbox_id: str) -> str:
    return f"{NETNS_PREFIX}{sandbox_id}"


class Links:
    def __init__(
        self, subnet: ipaddress.IPv4Network, loopback: tuple[int, int] | None = None
    ) -> None:
        """`loopback`: the control plane listens on this host's loopback at its first port,
        and a sandbox's own `127.0.0.1:<that port>` leads to the control plane too, at its
        sandbox-side port, the second (`_alias`)."""
        self.subnet = subnet
        self.gateway = subnet.network_address + 1
        self.holder = f"{HOLDER_PREFIX}{int(subnet.network_address):08x}"
        self.loopback = loopback

    @property
    def interfaces(self) -> str:
        """The sandboxes' ends on this host, as nftables matches them."""
        return f"{VETH_PREFIX}*"

    def resolv_conf(self) -> bytes:
        """A sandbox's /etc/resolv.conf: the control plane's resolver on the gateway."""
        return f"nameserver {self.gateway}\noptions edns0\n".encode()

    async def prepare(self) -> None:
        """The gateway's holder and the subnet's unreachable route (idempotent); NetworkError
        when another network of this host already uses the subnet."""
        for route in await ip_json("-4", "route", "show", "table", "main"):
            destination = str(route.get("dst", ""))
            device = str(route.get("dev", ""))
            if destination in ("", "default") or device.startswith((VETH_PREFIX, self.holder)):
                continue
            if route.get("type") == "unreachable" and destination == str(self.subnet):
                continue
            try:
                network = ipaddress.IPv4Network(destination, strict=False)
            except ValueError:
                continue
            if network.overlaps(self.subnet):
                raise NetworkError(
                    f"the sandbox subnet {self.subnet} overlaps {network} of "
                    f"this host ({device or route.get('type')}): set "
                    "CONTROL_PLANE_SANDBOX_SUBNET to a range no network here uses"
                )
        try:
            await ip_json("link", "show", "dev", self.holder)
        except NetworkError:
            try:
                await ip_batch([f"link add {self.holder} type bridge"])
            except NetworkError as exc:
                if "File exists" not in str(exc):  # another control plane made it meanwhile
                    raise
        await ip_batch(
            [
                f"link set dev {self.holder} addrgenmode none",
                f"address replace {self.gateway}/32 dev {self.holder}",
                f"link set dev {self.holder} up",
                f"route replace unreachable {self.subnet}",
            ]
        )

    async def attach(self, sandbox_id: str) -> Attached:
        """A namespace and a link for the sandbox (one left by an earlier start of it is
        removed first). NetworkError when it cannot be made; nothing of it is left then."""
        netns = netns_of(sandbox_id)
        if self.has(sandbox_id):
            await self.detach(sandbox_id)
        address = await self._claim()
        veth = veth_of(address)
        try:
            await ip_batch(
                [
                    f"netns add {netns}",
                    f"link add {veth} type veth peer name {INSIDE} netns {netns}",
                    f"link set dev {veth} addrgenmode none",
                    f"address add {self.gateway}/32 dev {veth}",
                    f"link set dev {veth} up",
                    f"route replace {address}/32 dev {veth} src {self.gateway}",
                ]
            )
            await ip_batch(
                [
                    "link set dev lo up",
                    f"link set dev {INSIDE} addrgenmode none",
                    f"address add {address}/32 dev {INSIDE}",
                    f"link set dev {INSIDE} up",
                    f"route add {self.gateway}/32 dev {INSIDE} scope link",
                    f"route add default via {self.gateway} dev {INSIDE} src {address}",
                ],
                netns=netns,
            )
            if self.loopback is not None:
                await self._alias(sandbox_id, *self.loopback)
        except BaseException:
            await self.detach(sandbox_id, address)
            raise
        return Attached(NETNS_DIR / netns, address, veth)

    async def _alias(self, sandbox_id: str, port: int, sandbox_port: int) -> None:
        """`http://127.0.0.1:<port>` inside the sandbox is the control plane, as it is on this
        host: a client that hands the sandbox the control plane's address as its users know it
        (the OpenHands Cloud workspace's secrets) is answered by the control plane's side
        here. The sandbox's own loopback keeps every other port (its NAT table is in its
        namespace, where the sandbox has no right to change it)."""
        enter = self.enter(sandbox_id)[:-1]
        # One command in the namespace (a process fewer per start): packets from a loopback
        # address may leave by eth0 (masqueraded on the way), then the rules.
        localnet = f"/proc/sys/net/ipv4/conf/{INSIDE}/route_localnet"
        await run(
            [*enter, "sh", "-c", f"echo 1 > {localnet} && exec nft -f -"],
            (
                "table ip control_plane {\n"
                "  chain output { type nat hook output priority -100; policy accept;\n"
                f"    ip daddr 127.0.0.1 tcp dport {port}"
                f" dnat to {self.gateway}:{sandbox_port}; }}\n"
                "  chain postrouting { type nat hook postrouting priority 100; policy accept;\n"
                f'    oifname "{INSIDE}" ip saddr 127.0.0.0/8 masquerade; }}\n'
                "}\n"
            ),
        )

    async def _claim(self) -> ipaddress.IPv4Address:
        """A free address of the subnet, claimed by its route (the kernel refuses a second).
        A random one first: the routes held are read only after a clash (a `ip` process fewer
        per start while the subnet has room), and the next pick misses them."""
        hosts = int(self.subnet.num_addresses) - 3  # network, gateway, broadcast
        used: set[ipaddress.IPv4Address] = set()
        for attempt in range(CLAIM_TRIES):
            if attempt:
                used = await self._used()
            if len(used) >= hosts:
                break
            while (address := self.subnet.network_address + 2 + secrets.randbelow(hosts)) in used:
                pass
            try:
                await ip_batch([f"route add {address}/32 dev {self.holder}"])
                return address
            except NetworkError as exc:
                if "File exists" not in str(exc):
                    raise
        raise NetworkError(
            f"no free address in the sandbox subnet {self.subnet} (CONTROL_PLANE_SANDBOX_SUBNET)"
        )

    async def _used(self) -> set[ipaddress.IPv4Address]:
        found = set()
        for route in await ip_json(
            "-4", "route", "show", "table", "main", "root", str(self.subnet)
        ):
            try:
                network = ipaddress.IPv4Network(str(route.get("dst")))
            except ValueError:
                continue
            if network.prefixlen == 32:
                found.add(network.network_address)
        return found

    def has(self, sandbox_id: str) -> bool:
        """Whether the sandbox's namespace is on this host."""
        return (NETNS_DIR / netns_of(sandbox_id)).exists()

    async def address_of(self, sandbox_id: str) -> ipaddress.IPv4Address | None:
        """The sandbox's address, read from its namespace (None without one)."""
        if not self.has(sandbox_id):
            return None
        try:
            found = await ip_json("-n", netns_of(sandbox_id), "-4", "addr", "show", "dev", INSIDE)
        except NetworkError:
            return None
        for link in found:
            for info in link.get("addr_info", []):
                try:
                    return ipaddress.IPv4Address(str(info["local"]))
                except (KeyError, ValueError):
                    continue
        return None

    async def detach(self, sandbox_id: str, address: ipaddress.IPv4Address | None = None) -> None:
        """The sandbox's link, route and namespace removed (what is gone already is fine)."""
        address = address or await self.address_of(sandbox_id)
        steps = [["ip", "netns", "delete", netns_of(sandbox_id)]]
        if address is not None:
            # The link first: a namespace is freed only once its last process is gone, and
            # its address must be free at once.
            steps = [
                ["ip", "link", "delete", "dev", veth_of(address)],
                ["ip", "route", "delete", f"{address}/32"],
                *steps,
            ]
        for argv in steps:
            try:
                await run(argv)
            except NetworkError as exc:
                if not any(text in str(exc) for text in GONE):
                    raise

    async def namespaces(self) -> list[str]:
        """The sandbox ids whose namespaces are on this host (a sweep finds strays)."""
        if not NETNS_DIR.is_dir():
            return []
        return [
            p.name[len(NETNS_PREFIX) :]
            for p in NETNS_DIR.iterdir()
            if p.name.startswith(NETNS_PREFIX)
        ]

    def enter(self, sandbox_id: str) -> list[str]:
        """The command prefix that runs what follows in the sandbox's namespace."""
        nsenter = shutil.which("nsenter") or "/usr/bin/nsenter"
        return [nsenter, f"--net={NETNS_DIR / netns_of(sandbox_id)}", "--"]
