"""The sandboxes' resolver over real sockets on loopback, as a sandbox asks it: a dnspython
client, the resolver, and behind it a small authoritative server run here (`Upstream`).

Nothing leaves this machine: every socket is on 127.0.0.1 (or 127.0.0.2, an unknown source).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import dns.asyncquery
import dns.edns
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest

from control_plane.network.policy import NetworkPolicy
from control_plane.network.resolver import (
    ALL_BLOCKED,
    NO_NAMES,
    NOT_LISTED,
    Asker,
    Bounds,
    Resolver,
)

CLIENT = "127.0.0.1"
STRANGER = "127.0.0.2"
SILENT = dns.name.from_text("silent.test.")
BIG_TXT = " ".join(f'"{n:03d}{"x" * 200}"' for n in range(20))
ZONE = [
    dns.rrset.from_text(name, ttl, "IN", rdtype, *values)
    for name, ttl, rdtype, values in (
        ("allowed.test.", 300, "A", ["203.0.113.10"]),
        ("rebind.test.", 300, "A", ["127.0.0.1", "10.1.2.3"]),
        ("mixed.test.", 300, "A", ["203.0.113.11", "192.168.1.1"]),
        ("mixed.test.", 300, "AAAA", ["2001:db8::1"]),
        ("other.test.", 300, "A", ["203.0.113.12"]),
        ("cname.allowed.test.", 300, "CNAME", ["target.elsewhere.test."]),
        ("target.elsewhere.test.", 60, "A", ["203.0.113.13"]),
        ("big.allowed.test.", 300, "TXT", [BIG_TXT]),
        ("10.113.0.203.in-addr.arpa.", 300, "PTR", ["allowed.test."]),
        ("1.0.0.127.in-addr.arpa.", 300, "PTR", ["localhost.host.internal."]),
    )
]
SOA = dns.rrset.from_text("test.", 60, "IN", "SOA", "ns.test. admin.test. 1 60 60 60 60")


class Upstream:
    """An authoritative server for `ZONE` on 127.0.0.1, UDP and TCP on one free port. It never
    answers `SILENT`, and over UDP truncates what does not fit the query's payload."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []
        """(transport, name) of every question it received."""
        self.port = 0
        self._transport: asyncio.DatagramTransport | None = None
        self._server: asyncio.Server | None = None
        self._conversations: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(16):
            transport, _ = await loop.create_datagram_endpoint(
                lambda: _UpstreamDatagrams(self), local_addr=(CLIENT, 0)
            )
            port = transport.get_extra_info("sockname")[1]
            try:
                self._server = await asyncio.start_server(self._converse, CLIENT, port)
            except OSError:
                transport.close()
                continue
            self._transport, self.port = transport, port
            return
        raise OSError("no port free for both UDP and TCP on 127.0.0.1")

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        if self._server is not None:
            self._server.close()
        for task in self._conversations:
            task.cancel()
        await asyncio.gather(*self._conversations, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def answer(self, wire: bytes, transport: str) -> bytes | None:
        query = dns.message.from_wire(wire)
        question = query.question[0]
        self.asked.append((transport, question.name.to_text(omit_final_dot=True)))
        if question.name == SILENT:
            return None
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        name = question.name
        for rrset in ZONE:
            if rrset.name == name and rrset.rdtype == dns.rdatatype.CNAME:
                response.answer.append(rrset)
                name = rrset[0].target
        response.answer += [r for r in ZONE if r.name == name and r.rdtype == question.rdtype]
        if not any(r.name == name for r in ZONE):
            response.set_rcode(dns.rcode.NXDOMAIN)
            response.authority.append(SOA)
        if transport == "tcp":
            return response.to_wire(max_size=65535)  # 0 would mean the query's payload
        limit = query.payload if query.edns >= 0 else 512
        return response.to_wire(max_size=limit, prefer_truncation=True)

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conversations.add(task)
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(2), "big")
                answer = self.answer(await reader.readexactly(size), "tcp")
                if answer is not None:
                    writer.write(len(answer).to_bytes(2, "big") + answer)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._conversations.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


class _UpstreamDatagrams(asyncio.DatagramProtocol):
    def __init__(self, upstream: Upstream) -> None:
        self._upstream = upstream
        self._transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        answer = self._upstream.answer(data, "udp")
        if answer is not None:
            self._transport.sendto(answer, addr)


@dataclass
class Sandbox:
    """The one sandbox the resolver knows, at CLIENT: its policy (the test sets it), and what
    the resolver told `admit` and `refuse` about it."""

    policy: NetworkPolicy = field(default_factory=NetworkPolicy)
    admit_fails: bool = False
    looked_up: list[str] = field(default_factory=list)
    admitted: list[tuple[str, list[str], tuple[int, ...], int]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)

    async def lookup(self, source: str) -> Asker | None:
        self.looked_up.append(source)
        return Asker("sandbox-1", self.policy) if source == CLIENT else None

    async def admit(
        self,
        asker: Asker,
        source: str,
        addresses: list[ipaddress.IPv4Address],
        ports: tuple[int, ...],
        ttl: int,
    ) -> None:
        assert asker.sandbox_id == "sandbox-1"
        if self.admit_fails:
            raise OSError("nft: no such set")
        self.admitted.append((source, [str(a) for a in addresses], ports, ttl))

    def refuse(self, asker: Asker, name: str, why: str) -> None:
        self.refused.append((name, why))


@contextlib.asynccontextmanager
async def running(sandbox: Sandbox, upstream: list[str], **options: Any) -> AsyncIterator[int]:
    """A resolver for `sandbox` on 127.0.0.1 (a free port, returned), closed on the way out."""
    resolver = Resolver(sandbox.lookup, sandbox.admit, upstream, refuse=sandbox.refuse, **options)
    try:
        yield await resolver.listen(CLIENT, 0)
    finally:
        await resolver.close()


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    server = Upstream()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
def sandbox() -> Sandbox:
    return Sandbox()


@pytest.fixture
async def port(sandbox: Sandbox, upstream: Upstream) -> AsyncIterator[int]:
    async with running(sandbox, [f"{CLIENT}:{upstream.port}"], timeout=0.5) as bound:
        yield bound


async def ask(
    port: int, name: str, rdtype: str = "A", *, tcp: bool = False, source: str = CLIENT
) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype, use_edns=0)
    if tcp:
        return await dns.asyncquery.tcp(query, CLIENT, timeout=10, port=port, source=source)
    return await dns.asyncquery.udp(query, CLIENT, timeout=10, port=port, source=source)


def addresses(response: dns.message.Message) -> list[str]:
    return [
        rd.to_text()
        for rrset in response.answer
        for rd in rrset
        if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA)
    ]


def reasons(response: dns.message.Message) -> list[tuple[int, str | None]]:
    return [(error.code, error.text) for error in response.extended_errors()]


def allowlist(*allow: str) -> NetworkPolicy:
    return NetworkPolicy(mode="allowlist", allow=allow)


async def test_a_source_no_sandbox_has_is_refused(
    port: int, sandbox: Sandbox, upstream: Upstream
) -> None:
    for tcp in (False, True):
        response = await ask(port, "allowed.test", tcp=tcp, source=STRANGER)
        assert response.rcode() == dns.rcode.REFUSED
    assert sandbox.looked_up == [STRANGER, STRANGER]
    assert upstream.asked == []


async def test_none_answers_no_name(port: int, sandbox: Sandbox, upstream: Upstream) -> None:
    sandbox.policy = NetworkPolicy(mode="none", allow=("allowed.test",))
    response = await ask(port, "allowed.test")
    assert response.rcode() == dns.rcode.NXDOMAIN
    assert reasons(response) == [(dns.edns.EDECode.PROHIBITED, NO_NAMES)]
    assert sandbox.refused == [("allowed.test", NO_NAMES)]
    assert upstream.asked == [] and sandbox.admitted == []


async def test_allowlist_answers_a_listed_name_and_admits_its_addresses(
    port: int, sandbox: Sandbox
) -> None:
    sandbox.policy = allowlist("allowed.test:443")
    query = dns.message.make_query("Allowed.Test", "A", use_edns=0)
    response = await dns.asyncquery.udp(query, CLIENT, timeout=10, port=port)
    assert response.rcode() == dns.rcode.NOERROR
    assert addresses(response) == ["203.0.113.10"]
    assert response.id == query.id and response.question == query.question
    assert response.flags & dns.flags.RD and response.flags & dns.flags.RA
    assert not response.flags & dns.flags.AA
    assert sandbox.admitted == [(CLIENT, ["203.0.113.10"], (443,), 300)]
    assert sandbox.refused == []


async def test_allowlist_refuses_a_name_it_does_not_list(
    port: int, sandbox: Sandbox, upstream: Upstream
) -> None:
    sandbox.policy = allowlist("allowed.test:443")
    response = await ask(port, "other.test", tcp=True)
    assert response.rcode() == dns.rcode.NXDOMAIN
    assert reasons(response) == [(dns.edns.EDECode.BLOCKED, NOT_LISTED)]
    assert sandbox.refused == [("other.test", NOT_LISTED)]
    assert upstream.asked == [] and sandbox.admitted == []


async def test_a_wildcard_lists_subdomains_through_their_cname_chain(
    port: int, sandbox: Sandbox
) -> None:
    sandbox.policy = allowlist("*.allowed.test:80,443")
    response = await ask(port, "cname.allowed.test")
    assert [rrset.rdtype for rrset in response.answer] == [dns.rdatatype.CNAME, dns.rdatatype.A]
    assert addresses(response) == ["203.0.113.13"]
    # The CNAME's target is let through under the listed name's ports, for the A's TTL.
    assert sandbox.admitted == [(CLIENT, ["203.0.113.13"], (80, 443), 60)]
    apex = await ask(port, "allowed.test")
    assert apex.rcode() == dns.rcode.NXDOMAIN
    assert sandbox.refused == [("allowed.test", NOT_LISTED)]


async def test_a_listed_name_pointed_at_private_addresses_is_refused(
    port: int, sandbox: Sandbox
) -> None:
    for policy in (allowlist("rebind.test"), NetworkPolicy(mode="open")):
        sandbox.policy = policy
        response = await ask(port, "rebind.test")
        assert response.rcode() == dns.rcode.NXDOMAIN
        assert reasons(response) == [(dns.edns.EDECode.BLOCKED, ALL_BLOCKED)]
    assert sandbox.refused == [("rebind.test", ALL_BLOCKED)] * 2
    assert sandbox.admitted == []


async def test_blocked_addresses_and_every_aaaa_are_left_out(port: int, sandbox: Sandbox) -> None:
    sandbox.policy = allowlist("mixed.test")
    response = await ask(port, "mixed.test")
    assert addresses(response) == ["203.0.113.11"]
    assert sandbox.admitted == [(CLIENT, ["203.0.113.11"], (), 300)]
    six = await ask(port, "mixed.test", "AAAA")
    assert six.rcode() == dns.rcode.NOERROR and six.answer == []
    sandbox.policy = NetworkPolicy(mode="open")
    response = await ask(port, "mixed.test", tcp=True)
    assert addresses(response) == ["203.0.113.11"]
    assert len(sandbox.admitted) == 1 and sandbox.refused == []


async def test_an_address_the_firewall_could_not_take_is_never_answered(
    port: int, sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    sandbox.policy = allowlist("allowed.test")
    sandbox.admit_fails = True
    response = await ask(port, "allowed.test")
    assert response.rcode() == dns.rcode.SERVFAIL and response.answer == []
    assert "nft: no such set" in caplog.text


async def test_open_asks_upstream_for_any_name_without_admitting(
    port: int, sandbox: Sandbox, upstream: Upstream
) -> None:
    sandbox.policy = NetworkPolicy(mode="open")
    assert addresses(await ask(port, "other.test")) == ["203.0.113.12"]
    missing = await ask(port, "missing.test")
    assert missing.rcode() == dns.rcode.NXDOMAIN and reasons(missing) == []
    assert [rrset.rdtype for rrset in missing.authority] == [dns.rdatatype.SOA]
    public = await ask(port, "10.113.0.203.in-addr.arpa", "PTR")
    assert [rd.to_text() for rd in public.answer[0]] == ["allowed.test."]
    for private in (
        "1.0.0.127.in-addr.arpa",
        "168.192.in-addr.arpa",
        "in-addr.arpa",
        "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa",
    ):
        response = await ask(port, private, "PTR")
        assert response.rcode() == dns.rcode.NXDOMAIN, private
    assert upstream.asked == [
        ("udp", name) for name in ("other.test", "missing.test", "10.113.0.203.in-addr.arpa")
    ]
    assert sandbox.admitted == []


async def test_no_upstream_answer_is_servfail(sandbox: Sandbox, upstream: Upstream) -> None:
    sandbox.policy = allowlist("silent.test", "allowed.test")
    async with running(sandbox, [f"{CLIENT}:{upstream.port}"], timeout=0.5) as port:
        # The client waits 10 s; the resolver gives up after its own 0.5 s.
        response = await ask(port, "silent.test")
        assert response.rcode() == dns.rcode.SERVFAIL
        assert [code for code, _ in reasons(response)] == [dns.edns.EDECode.NETWORK_ERROR]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((CLIENT, 0))
        closed = probe.getsockname()[1]
    async with running(sandbox, [f"{CLIENT}:{closed}"], timeout=0.5) as port:
        assert (await ask(port, "allowed.test")).rcode() == dns.rcode.SERVFAIL
    assert sandbox.admitted == []


async def test_an_answer_too_large_for_udp_is_truncated_and_whole_over_tcp(
    port: int, sandbox: Sandbox, upstream: Upstream
) -> None:
    sandbox.policy = allowlist("*.allowed.test")
    over_udp = await ask(port, "big.allowed.test", "TXT")
    assert over_udp.flags & dns.flags.TC
    # The upstream truncated too, and the resolver asked it again over TCP.
    assert upstream.asked == [("udp", "big.allowed.test"), ("tcp", "big.allowed.test")]
    over_tcp = await ask(port, "big.allowed.test", "TXT", tcp=True)
    assert not over_tcp.flags & dns.flags.TC
    assert len(over_tcp.answer[0][0].strings) == 20
    assert len(over_tcp.to_wire()) > 4000


async def test_malformed_input_is_dropped_or_formerr_and_nothing_breaks(
    port: int, sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    a_response = dns.message.make_response(dns.message.make_query("other.test", "A")).to_wire()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
        for junk in (b"", b"\x00", b"\xab\xcd" + b"\xff" * 40, a_response):
            raw.sendto(junk, (CLIENT, port))
    assert (await ask(port, "other.test")).rcode() == dns.rcode.NOERROR

    two = dns.message.make_query("other.test", "A")
    two.question.append(
        dns.rrset.RRset(dns.name.from_text("allowed.test."), dns.rdataclass.IN, dns.rdatatype.A)
    )
    reader, writer = await asyncio.open_connection(CLIENT, port)
    try:
        answer = await exchange(reader, writer, b"\xab\xcd" + b"\xff" * 40)
        assert answer[:2] == b"\xab\xcd" and answer[3] & 0xF == dns.rcode.FORMERR
        answer = await exchange(reader, writer, two.to_wire())
        assert dns.message.from_wire(answer).rcode() == dns.rcode.FORMERR
        query = dns.message.make_query("other.test", "A")
        answer = await exchange(reader, writer, query.to_wire())
        assert addresses(dns.message.from_wire(answer)) == ["203.0.113.12"]
        # Too short for an id: nothing to answer, the connection ends.
        writer.write(b"\x00\x01\x00")
        async with asyncio.timeout(10):
            assert await reader.read() == b""
    finally:
        writer.close()
        await writer.wait_closed()
    assert (await ask(port, "other.test", tcp=True)).rcode() == dns.rcode.NOERROR
    assert not [record for record in caplog.records if record.exc_info]


async def test_a_burst_past_a_sources_rate_is_refused(sandbox: Sandbox, upstream: Upstream) -> None:
    # One token in 100 s: the burst of 5 is all there is for this test.
    bounds = Bounds(rate=0.01, burst=5)
    async with running(sandbox, [f"{CLIENT}:{upstream.port}"], bounds=bounds) as port:
        rcodes = [(await ask(port, "other.test")).rcode() for _ in range(8)]
    assert rcodes == [dns.rcode.NOERROR] * 5 + [dns.rcode.REFUSED] * 3


async def test_tcp_connections_are_bounded_in_number_and_idle_time(
    sandbox: Sandbox, upstream: Upstream
) -> None:
    bounds = Bounds(connections=1, idle=0.5)
    query = dns.message.make_query("other.test", "A").to_wire()
    async with running(sandbox, [f"{CLIENT}:{upstream.port}"], bounds=bounds) as port:
        first = await asyncio.open_connection(CLIENT, port)
        second: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            assert addresses(dns.message.from_wire(await exchange(*first, query)))
            second = await asyncio.open_connection(CLIENT, port)
            async with asyncio.timeout(10):
                assert await second[0].read() == b""  # one too many: closed at once
                assert await first[0].read() == b""  # silent past the idle bound: closed
        finally:
            for _, writer in filter(None, (first, second)):
                writer.close()
                with contextlib.suppress(ConnectionError):
                    await writer.wait_closed()


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, wire: bytes
) -> bytes:
    """One DNS message over TCP and its answer (RFC 1035 4.2.2 framing)."""
    writer.write(len(wire).to_bytes(2, "big") + wire)
    await writer.drain()
    async with asyncio.timeout(10):
        size = int.from_bytes(await reader.readexactly(2), "big")
        return await reader.readexactly(size)
