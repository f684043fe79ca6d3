"""What the sandboxes' resolver may say: an upstream answer filtered down to the addresses a
sandbox reaches, and the refusals it answers instead, with their reasons (RFC 8914).

Kept apart from the sockets (`resolver`) because it is the part that decides what a sandbox
learns; it holds no state and does no I/O.

- No AAAA record ever: sandboxes have no IPv6 route, and an AAAA answer makes clients try
  IPv6 first and wait for it to fail.
- No A record in a range no sandbox reaches (`policy.blocked`). A name whose every A record
  was dropped is refused outright (`Kept.all_blocked`): a name pointed at 127.0.0.1 or 10.x
  (DNS rebinding) fails at resolution, with a reason, rather than at connect.
- No RRSIG (what they sign was changed), no additional section (glue and hints carry
  addresses too), only the SOA of the authority section (for negative caching).
- A reverse name (`in-addr.arpa`, `ip6.arpa`) touching a blocked range is never asked
  upstream: it would name the host's private networks.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

import dns.edns
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.rrset

from control_plane.network.policy import BLOCKED_V4, BLOCKED_V6, blocked

#: The EDNS payload this server advertises (DNS Flag Day 2020: a size no path fragments).
PAYLOAD = 1232
_V4_REVERSE = dns.name.from_text("in-addr.arpa.")
_V6_REVERSE = dns.name.from_text("ip6.arpa.")
_OCTET = re.compile(r"0|[1-9][0-9]{0,2}")
_NIBBLE = re.compile(r"[0-9a-f]")


@dataclass(frozen=True)
class Kept:
    """An upstream answer as a sandbox may see it."""

    response: dns.message.Message
    """The answer to the sandbox's own query (its id, its question)."""
    addresses: list[ipaddress.IPv4Address]
    """The A addresses answered: what the sandbox will connect to next."""
    ttl: int
    """The smallest TTL of those A records, at least 1 (1 when there are none)."""
    all_blocked: bool
    """The name had A records and every one was in a blocked range."""


def filtered(query: dns.message.Message, upstream: dns.message.Message) -> Kept:
    """The answer to `query` made from `upstream`'s answer to the same question."""
    response = reply(query, upstream.rcode())
    addresses: list[ipaddress.IPv4Address] = []
    ttls: list[int] = []
    had_a = False
    for rrset in upstream.answer:
        if rrset.rdtype in (dns.rdatatype.AAAA, dns.rdatatype.RRSIG):
            continue
        if rrset.rdtype == dns.rdatatype.A:
            had_a = True
            kept = [rd for rd in rrset if not blocked(ipaddress.IPv4Address(rd.to_text()))]
            if not kept:
                continue
            addresses.extend(ipaddress.IPv4Address(rd.to_text()) for rd in kept)
            ttls.append(rrset.ttl)
            rrset = dns.rrset.from_rdata_list(rrset.name, rrset.ttl, kept)
        response.answer.append(rrset)
    response.authority = [r for r in upstream.authority if r.rdtype == dns.rdatatype.SOA]
    return Kept(
        response=response,
        addresses=addresses,
        ttl=max(1, min(ttls, default=1)),
        all_blocked=had_a and not addresses,
    )


def reply(
    query: dns.message.Message,
    rcode: dns.rcode.Rcode,
    code: dns.edns.EDECode | None = None,
    text: str = "",
) -> dns.message.Message:
    """An empty answer to `query` as a recursive resolver gives it (its id and question, RD
    as asked, RA), with `rcode` and, when the client speaks EDNS, an Extended DNS Error."""
    response = dns.message.make_response(query, recursion_available=True, our_payload=PAYLOAD)
    response.set_rcode(rcode)
    if code is not None and query.edns >= 0:
        # Without EDNS in the query there is no OPT record to carry the reason (RFC 6891).
        response.use_edns(
            0, 0, PAYLOAD, query.payload, options=[dns.edns.EDEOption(code, text or None)]
        )
    return response


def formerr(wire: bytes) -> bytes | None:
    """A FORMERR answer to the unparsable message `wire`: its id and nothing else trusted
    (RFC 1035 4.1.1); None when it is too short to carry an id."""
    if len(wire) < 2:
        return None
    return wire[:2] + bytes((dns.flags.QR >> 8, dns.rcode.FORMERR)) + bytes(8)


def private_reverse(name: dns.name.Name) -> bool:
    """Whether `name` is a reverse name of an address, or a network, that touches a range no
    sandbox reaches; a reverse name that denotes no address at all counts as one too."""
    if name.is_subdomain(_V4_REVERSE):
        v4 = _v4_network(_labels(name, _V4_REVERSE))
        return v4 is None or any(v4.overlaps(b) for b in BLOCKED_V4)
    if name.is_subdomain(_V6_REVERSE):
        v6 = _v6_network(_labels(name, _V6_REVERSE))
        return v6 is None or any(v6.overlaps(b) for b in BLOCKED_V6)
    return False


def _labels(name: dns.name.Name, origin: dns.name.Name) -> list[str]:
    """A reverse name's labels under `origin`, the most significant first."""
    labels = name.relativize(origin).labels
    return [label.decode("ascii", "replace").lower() for label in reversed(labels)]


def _v4_network(labels: list[str]) -> ipaddress.IPv4Network | None:
    if len(labels) > 4 or not all(_OCTET.fullmatch(x) and int(x) < 256 for x in labels):
        return None
    octets = [int(x) for x in labels] + [0] * (4 - len(labels))
    return ipaddress.IPv4Network((bytes(octets), 8 * len(labels)))


def _v6_network(labels: list[str]) -> ipaddress.IPv6Network | None:
    if len(labels) > 32 or not all(_NIBBLE.fullmatch(x) for x in labels):
        return None
    return ipaddress.IPv6Network((int("".join(labels).ljust(32, "0"), 16), 4 * len(labels)))
