"""The DNS server the control plane runs for its sandboxes: names answered as each sandbox's
egress policy lists them, and the addresses answered let through before the answer leaves.

A sandbox's resolv.conf names this server, on its gateway address; its firewall sends DNS
nowhere else. For each query:

- the source address says which sandbox asks (`lookup`); an unknown source is REFUSED;
- `none` answers every name NXDOMAIN (EDE 18, Prohibited); `allowlist` answers a name its
  rules do not list NXDOMAIN (EDE 15, Blocked); a listed name, or any name under `open`, is
  asked of the upstream resolvers, the same question;
- the upstream answer is filtered (`answers`): no AAAA, no A record in a range no sandbox
  reaches; a name whose every A record was dropped is NXDOMAIN (EDE 15), so a listed name
  pointed at 127.0.0.1 or 10.0.0.0/8 (DNS rebinding) is refused at resolution, with a reason;
- under `allowlist`, `admit` adds the kept addresses to the sandbox's firewall set before the
  answer is sent, so the connection that follows it is let through; when `admit` fails the
  answer is SERVFAIL: no address the firewall does not know is ever answered.

Everything that can grow is bounded (`Bounds`): queries in flight, each source's rate, TCP
connections and their idle time; a message is at most 64 KiB by DNS's own framing. Bad input
never raises out of a handler nor logs a traceback: a malformed datagram is dropped, a
malformed TCP message is answered FORMERR.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import cast

import dns.asyncquery
import dns.edns
import dns.exception
import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.resolver
import dns.rrset

from control_plane.network import answers
from control_plane.network.policy import NetworkPolicy

log = logging.getLogger(__name__)

#: A DNS message's largest size: TCP frames it with a 2-byte length, UDP cannot carry more.
MAX_MESSAGE = 65535
NO_NAMES = "this sandbox's network policy allows no names"
NOT_LISTED = "not in this sandbox's network allowlist"
ALL_BLOCKED = "resolves only to addresses no sandbox reaches"
PRIVATE_REVERSE = "names an address no sandbox reaches"


@dataclass(frozen=True)
class Asker:
    """Who a query came from: a sandbox and its policy at that moment."""

    sandbox_id: str
    policy: NetworkPolicy


Lookup = Callable[[str], Awaitable[Asker | None]]
"""A query's source IPv4 address -> the sandbox it belongs to; None for an unknown source."""
Admit = Callable[[Asker, str, list[ipaddress.IPv4Address], tuple[int, ...], int], Awaitable[None]]
"""(asker, source address, addresses answered, their ports (empty: every port), TTL seconds):
awaited before the answer is sent, it lets those addresses through the sandbox's firewall."""
Refuse = Callable[[Asker, str, str], None]
"""(asker, query name, why) for each name refused by policy: for counting, not for control."""


@dataclass(frozen=True)
class Bounds:
    """The limits of one resolver: everything a client can make grow has one."""

    in_flight: int = 512
    """Queries being answered at once, over all sources; beyond it a query is dropped (a
    datagram) or its connection closed: a client retries, a flood does not queue."""
    rate: float = 100.0
    """Queries a second from one source address, refilled continuously..."""
    burst: int = 200
    """...and at once; beyond them the query is answered REFUSED."""
    sources: int = 4096
    """Source addresses whose rate is remembered (a full bucket is forgotten first)."""
    connections: int = 64
    """TCP connections at once; a further one is closed as it is accepted."""
    idle: float = 10.0
    """Seconds a TCP connection may take to send its next query, or to read an answer."""


class Resolver:
    """The sandboxes' DNS server: `listen` on their gateway addresses, `close` at shutdown."""

    def __init__(
        self,
        lookup: Lookup,
        admit: Admit,
        upstream: Sequence[str] = (),
        *,
        refuse: Refuse | None = None,
        timeout: float = 2.0,
        bounds: Bounds = Bounds(),
    ) -> None:
        """`upstream`: "address" or "address:port" ("[v6]:port"), asked in turn; empty: the
        nameservers of this host's /etc/resolv.conf. `timeout`: seconds for an upstream
        answer, over all of them (a client's own timeout is commonly 5 s)."""
        self._lookup = lookup
        self._admit = admit
        self._refuse = refuse
        self._upstream = [_server(text) for text in upstream] or _system_servers()
        self._timeout = timeout
        self._bounds = bounds
        self._rates = _Rates(bounds)
        self._in_flight = 0
        self._connections = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._transports: list[asyncio.DatagramTransport] = []
        self._servers: list[asyncio.Server] = []

    async def listen(self, host: str, port: int = 53) -> int:
        """Answer UDP and TCP on `host` (an address) and `port`; returns the port (the one the
        system chose for 0). May be called for several addresses."""
        udp, tcp = _sockets(host, port)
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await loop.create_datagram_endpoint(lambda: _Datagrams(self), sock=udp)
        except BaseException:
            udp.close()
            tcp.close()
            raise
        self._transports.append(transport)
        try:
            self._servers.append(await asyncio.start_server(self._connection, sock=tcp))
        except BaseException:
            tcp.close()
            raise
        port = udp.getsockname()[1]
        log.info("resolving for sandboxes on %s port %d (udp, tcp)", host, port)
        return int(port)

    async def close(self) -> None:
        """Stop listening, end the queries and connections under way, release every socket."""
        for transport in self._transports:
            transport.close()
        for server in self._servers:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self._transports.clear()
        self._servers.clear()

    # -- the sockets -------------------------------------------------------------------------

    def _datagram(
        self, transport: asyncio.DatagramTransport, wire: bytes, address: tuple[str, int]
    ) -> None:
        if self._in_flight >= self._bounds.in_flight:
            return
        self._in_flight += 1
        self._track(self._answer_datagram(transport, wire, address))

    async def _answer_datagram(
        self, transport: asyncio.DatagramTransport, wire: bytes, address: tuple[str, int]
    ) -> None:
        try:
            answer = await self._answer(wire, address[0], over_tcp=False)
        finally:
            self._in_flight -= 1
        if answer is not None and not transport.is_closing():
            transport.sendto(answer, address)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._connections += 1
        peer = writer.get_extra_info("peername")
        try:
            if peer and self._connections <= self._bounds.connections:
                await self._converse(reader, writer, str(peer[0]))
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass  # a client that left, or stayed silent too long: nothing is owed to it
        finally:
            self._connections -= 1
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _converse(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source: str
    ) -> None:
        # One query at a time per connection: answers keep their order and a connection
        # holds at most one query in flight.
        while True:
            async with asyncio.timeout(self._bounds.idle):
                size = int.from_bytes(await reader.readexactly(2), "big")
                wire = await reader.readexactly(size)
            if self._in_flight >= self._bounds.in_flight:
                return
            self._in_flight += 1
            try:
                answer = await self._answer(wire, source, over_tcp=True)
            finally:
                self._in_flight -= 1
            if answer is None:
                return
            async with asyncio.timeout(self._bounds.idle):
                writer.write(len(answer).to_bytes(2, "big") + answer)
                await writer.drain()

    def _track(self, work: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- one query ---------------------------------------------------------------------------

    async def _answer(self, wire: bytes, source: str, *, over_tcp: bool) -> bytes | None:
        """The answer's wire to the query `wire` from `source`; None: send nothing."""
        try:
            query = dns.message.from_wire(wire)
        except Exception:  # hostile bytes into a parser: whatever fails is the sender's
            return answers.formerr(wire) if over_tcp else None
        if query.flags & dns.flags.QR:
            return None  # a response is never answered: two servers would echo forever
        if over_tcp:
            limit = MAX_MESSAGE
        else:
            # Larger than the client can take: TC set, and the client asks again over TCP.
            limit = max(512, query.payload) if query.edns >= 0 else 512
        try:
            response = await self._resolve(query, source)
            return response.to_wire(max_size=limit, prefer_truncation=True)
        except Exception:
            log.exception("answering %s from %s failed", query.question, source)
            return answers.reply(query, dns.rcode.SERVFAIL).to_wire(max_size=limit)

    async def _resolve(self, query: dns.message.Message, source: str) -> dns.message.Message:
        if not self._rates.take(source):
            return answers.reply(query, dns.rcode.REFUSED)
        if query.opcode() != dns.opcode.QUERY:
            return answers.reply(query, dns.rcode.NOTIMP)
        if len(query.question) != 1:
            return answers.reply(query, dns.rcode.FORMERR)
        question = query.question[0]
        if question.rdclass != dns.rdataclass.IN or (
            dns.rdatatype.is_metatype(question.rdtype) and question.rdtype != dns.rdatatype.ANY
        ):
            return answers.reply(query, dns.rcode.REFUSED)
        asker = await self._lookup(source)
        if asker is None:
            return answers.reply(query, dns.rcode.REFUSED)
        name = question.name.to_text(omit_final_dot=True).lower()
        ports = asker.policy.names(name)
        if ports is None:
            if asker.policy.mode == "none":
                return self._refused(query, asker, name, dns.edns.EDECode.PROHIBITED, NO_NAMES)
            return self._refused(query, asker, name, dns.edns.EDECode.BLOCKED, NOT_LISTED)
        if answers.private_reverse(question.name):
            # The host's private networks have names; a sandbox has no business with them.
            return self._refused(query, asker, name, dns.edns.EDECode.BLOCKED, PRIVATE_REVERSE)
        upstream = await self._ask(question)
        if upstream is None:
            return answers.reply(
                query,
                dns.rcode.SERVFAIL,
                dns.edns.EDECode.NETWORK_ERROR,
                "no upstream resolver answered",
            )
        kept = answers.filtered(query, upstream)
        if kept.all_blocked:
            return self._refused(query, asker, name, dns.edns.EDECode.BLOCKED, ALL_BLOCKED)
        if asker.policy.mode == "allowlist" and kept.addresses:
            try:
                await self._admit(asker, source, kept.addresses, ports, kept.ttl)
            except Exception:
                log.exception(
                    "letting %s through for sandbox %s failed: answering SERVFAIL",
                    name,
                    asker.sandbox_id,
                )
                return answers.reply(query, dns.rcode.SERVFAIL)
        return kept.response

    def _refused(
        self, query: dns.message.Message, asker: Asker, name: str, code: dns.edns.EDECode, why: str
    ) -> dns.message.Message:
        if self._refuse is not None:
            self._refuse(asker, name, why)
        return answers.reply(query, dns.rcode.NXDOMAIN, code, why)

    async def _ask(self, question: dns.rrset.RRset) -> dns.message.Message | None:
        """The upstream answer to `question` (NOERROR or NXDOMAIN), None when none came.
        Servers are asked in turn, each with an equal share of the time left."""
        request = dns.message.make_query(
            question.name, question.rdtype, use_edns=0, payload=answers.PAYLOAD
        )
        deadline = time.monotonic() + self._timeout
        for index, (address, port) in enumerate(self._upstream):
            share = (deadline - time.monotonic()) / (len(self._upstream) - index)
            try:
                # One deadline over the UDP attempt and its TCP retry (each has its own).
                async with asyncio.timeout(share):
                    # A stray datagram (another id, another source) is not the answer:
                    # ignored, it cannot make the query fail.
                    response, _ = await dns.asyncquery.udp_with_fallback(
                        request, address, timeout=share, port=port, ignore_unexpected=True
                    )
            except (TimeoutError, dns.exception.DNSException, OSError, EOFError) as exc:
                log.debug("upstream %s:%d: %r", address, port, exc)
                continue
            if response.rcode() in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN):
                return response
            log.debug("upstream %s:%d: %s", address, port, dns.rcode.to_text(response.rcode()))
        return None


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, resolver: Resolver) -> None:
        self._resolver = resolver
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # The selector loop's datagram transport is not a DatagramTransport subclass (3.11).
        self._transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        if self._transport is not None:
            self._resolver._datagram(self._transport, data, (str(addr[0]), int(addr[1])))

    def error_received(self, exc: Exception) -> None:
        pass  # an ICMP error about a client that went away: nothing to answer


class _Rates:
    """A token bucket per source address (`Bounds.rate`, `Bounds.burst`)."""

    def __init__(self, bounds: Bounds) -> None:
        self._bounds = bounds
        self._buckets: dict[str, tuple[float, float]] = {}
        """Source -> (tokens, when counted)."""

    def take(self, source: str) -> bool:
        """Whether `source` may ask one more query now."""
        now = time.monotonic()
        tokens, then = self._buckets.get(source, (float(self._bounds.burst), now))
        tokens = min(float(self._bounds.burst), tokens + (now - then) * self._bounds.rate)
        allowed = tokens >= 1
        self._buckets[source] = (tokens - 1 if allowed else tokens, now)
        if len(self._buckets) > self._bounds.sources:
            self._forget(now)
        return allowed

    def _forget(self, now: float) -> None:
        # A bucket that has refilled is the same as no bucket: forgetting it changes nothing.
        refill = self._bounds.burst / self._bounds.rate
        self._buckets = {s: b for s, b in self._buckets.items() if now - b[1] < refill}
        while len(self._buckets) > self._bounds.sources:  # then the longest known
            del self._buckets[next(iter(self._buckets))]


def _sockets(host: str, port: int) -> tuple[socket.socket, socket.socket]:
    """A UDP and a TCP socket bound to `host` and one port. A given port is shared with the
    other control-plane processes of the deployment on this host (SO_REUSEPORT: the kernel
    spreads queries over them); port 0 is a free port of this resolver's own."""
    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    for _ in range(1 if port else 16):
        udp = _bound(family, socket.SOCK_DGRAM, host, port)
        try:
            return udp, _bound(family, socket.SOCK_STREAM, host, udp.getsockname()[1])
        except OSError:
            udp.close()
            if port:
                raise
    raise OSError(f"no port of {host} was free for both UDP and TCP")


def _bound(
    family: socket.AddressFamily, kind: socket.SocketKind, host: str, port: int
) -> socket.socket:
    sock = socket.socket(family, kind)
    try:
        if port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def _server(text: str) -> tuple[str, int]:
    """An upstream "address", "address:port" or "[v6 address]:port" as (address, port)."""
    host, port = text.strip(), 53
    if host.startswith("["):
        host, _, rest = host[1:].partition("]")
        port = int(rest.removeprefix(":") or 53)
    elif host.count(":") == 1:
        host, _, port_text = host.partition(":")
        port = int(port_text)
    ipaddress.ip_address(host)  # a name would need a resolver to reach the resolver
    if not 0 < port < 65536:
        raise ValueError(f"{text!r}: a port is 1 to 65535")
    return host, port


def _system_servers() -> list[tuple[str, int]]:
    try:
        configured = dns.resolver.Resolver(configure=True)
    except dns.resolver.NoResolverConfiguration:
        raise ValueError("no upstream resolver given and /etc/resolv.conf names none") from None
    servers = [(s, configured.port) for s in configured.nameservers if isinstance(s, str)]
    if not servers:
        raise ValueError("no upstream resolver given and /etc/resolv.conf names none usable")
    return servers
