"""A sandbox's egress policy: what its processes may connect to beyond the control plane.

Three modes, one rule underneath them all: a sandbox never reaches this machine (its loopback,
its own addresses, the networks it sits on), another sandbox, or a private, link-local
(a cloud's metadata service at 169.254.169.254 among them), shared (CGNAT), multicast or
reserved address, whatever its policy says (`BLOCKED`). Within that:

- `open` (the default): the rest of the internet, any protocol;
- `allowlist`: only what `allow` lists, over TCP: domain names (`example.com`, `*.example.com`
  for its subdomains), answered by the control plane's resolver and only for listed names, and
  IPv4 addresses or networks; each with ports (`example.com:443`, `10.0.0.0/8` is refused: a
  blocked range stays blocked) or without (every port); UDP (QUIC included) is dropped, DNS
  goes to the control plane's resolver only;
- `none`: nothing but the control plane itself (its webhook and LLM gateway).

A policy is a value (frozen, validated where it enters: 422 for a bad rule, in words) that a
user's settings hold as the default of new sandboxes and each sandbox holds as its own.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    field_validator,
)

Mode = Literal["open", "allowlist", "none"]
MAX_RULES = 256
#: Ports of one rule at most (a range is written as its ports: rules stay few and readable).
MAX_PORTS = 16

#: Never reached from a sandbox, whatever its policy (IANA's special-purpose registries: what
#: is not globally routable, and what a host's own neighbourhood is made of). The host's own
#: addresses and connected networks are added where the rules are made (`fence`).
BLOCKED_V4 = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",  # RFC 1918
        "100.64.0.0/10",  # shared address space (CGNAT)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local: cloud metadata services (169.254.169.254)
        "172.16.0.0/12",  # RFC 1918
        "192.0.0.0/24",  # IETF protocol assignments
        "192.168.0.0/16",  # RFC 1918
        "198.18.0.0/15",  # benchmarking (inter-network tests)
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the limited broadcast
    )
)
#: The same for IPv6 (sandboxes have no IPv6 route; these are refused at the resolver too).
BLOCKED_V6 = tuple(
    ipaddress.IPv6Network(n)
    for n in (
        "::/127",  # unspecified, loopback
        "::ffff:0:0/96",  # IPv4-mapped
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",  # discard
        "fc00::/7",  # unique local (ULA)
        "fe80::/10",  # link-local
        "ff00::/8",  # multicast
    )
)

#: One allowlist entry: a host (name, `*.` wildcard, IPv4 address or network) and ports.
RULE = re.compile(r"^(?P<host>\*\.[^:\s]+|[^:\s]+)(?::(?P<ports>[0-9]+(?:,[0-9]+)*))?$")
LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
#: The form of a rule, as the document shows it (the validator also knows which ranges no
#: sandbox reaches): a name (with `*.` for its subdomains) or an IPv4 address or network, then
#: optionally `:` and ports.
RULE_PATTERN = (
    r"^(?:(?:\*\.)?(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+"
    r"[A-Za-z][A-Za-z0-9-]{0,61}|(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?:/[0-9]{1,2})?)"
    r"(?::[0-9]{1,5}(?:,[0-9]{1,5}){0,15})?$"
)


def _checked(text: str) -> str:
    """A rule as kept: checked (ValueError in words), lower case."""
    parse_rule(text)
    return text.strip().lower()


RuleText = Annotated[
    str,
    StringConstraints(min_length=1, max_length=300, strip_whitespace=True),
    AfterValidator(_checked),
    # In the document only: a rule that misses it is refused by `parse_rule`,
    # in words that say what is wrong with it.
    WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 300, "pattern": RULE_PATTERN}),
]


@dataclass(frozen=True)
class Rule:
    """One parsed allowlist entry: exactly one of `domain` and `network`."""

    domain: str | None
    """A lower-case name; `*.example.com` matches its subdomains, not itself."""
    network: ipaddress.IPv4Network | None
    ports: tuple[int, ...]
    """Empty: every port."""

    def matches(self, name: str) -> bool:
        """Whether this rule lists `name` (a query's name, any case, a final dot or not)."""
        if self.domain is None:
            return False
        name = name.lower().rstrip(".")
        if self.domain.startswith("*."):
            return name.endswith(self.domain[1:]) and len(name) > len(self.domain) - 1
        return name == self.domain


def blocked(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether `address` is in a range no sandbox ever reaches (`BLOCKED_V4`, `BLOCKED_V6`)."""
    if isinstance(address, ipaddress.IPv4Address):
        return any(address in network for network in BLOCKED_V4)
    mapped = address.ipv4_mapped
    if mapped is not None:
        return blocked(mapped)
    return any(address in network for network in BLOCKED_V6)


def parse_rule(text: str) -> Rule:
    """`text` as a Rule; ValueError says what is wrong with it, in words."""
    text = text.strip().lower()
    found = RULE.match(text)
    if found is None:
        if text.count(":") > 1 or text.startswith("["):
            raise ValueError(
                f"{text!r}: sandboxes have no IPv6 connectivity; list IPv4 networks or names"
            )
        raise ValueError(f"{text!r} is not a host[:port[,port...]] rule")
    host, ports_text = found["host"], found["ports"]
    ports = tuple(sorted({int(p) for p in ports_text.split(",")})) if ports_text else ()
    if len(ports) > MAX_PORTS:
        raise ValueError(f"{text!r}: at most {MAX_PORTS} ports in one rule")
    if any(not 0 < port < 65536 for port in ports):
        raise ValueError(f"{text!r}: a port is 1 to 65535")
    network = _network(host)
    if network is not None:
        if any(network.subnet_of(b) for b in BLOCKED_V4):
            raise ValueError(
                f"{text!r} lies in a range no sandbox reaches (private, loopback, "
                "link-local or reserved)"
            )
        return Rule(domain=None, network=network, ports=ports)
    name = host.removeprefix("*.")
    labels = name.split(".")
    if len(name) > 253 or len(labels) < 2 or not all(LABEL.match(label) for label in labels):
        raise ValueError(
            f"{text!r}: a domain is a name of two labels or more (letters, digits "
            "and -), optionally preceded by *."
        )
    if labels[-1].isdigit():
        raise ValueError(f"{text!r} is neither a domain nor an IPv4 address")
    return Rule(domain=host, network=None, ports=ports)


def _network(host: str) -> ipaddress.IPv4Network | None:
    if not re.fullmatch(r"[0-9./]+", host):
        return None
    try:
        return ipaddress.IPv4Network(host, strict=True)
    except ValueError as exc:
        raise ValueError(f"{host!r} is not an IPv4 address or network ({exc})") from None


class NetworkPolicy(BaseModel):
    """A sandbox's egress policy (see the module's docstring for what each mode allows)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Mode = "open"
    """`open`: the internet, never this host, private ranges or other sandboxes; `allowlist`:
    only the hosts in `allow`, over TCP; `none`: only the control plane."""
    allow: tuple[RuleText, ...] = Field(default=(), max_length=MAX_RULES)
    """For `allowlist`: `example.com`, `*.example.com`, `203.0.113.0/24`, each optionally with
    ports (`example.com:443`, `*.pypi.org:80,443`). Kept when the mode changes."""

    @field_validator("allow")
    @classmethod
    def _once(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(value))

    @property
    def rules(self) -> tuple[Rule, ...]:
        return tuple(parse_rule(text) for text in self.allow)

    def names(self, query: str) -> tuple[int, ...] | None:
        """The ports a resolved `query` may be reached on under this policy (empty: every
        port); None when the policy does not list the name (the resolver refuses it)."""
        if self.mode == "open":
            return ()
        if self.mode == "none":
            return None
        matching = [rule for rule in self.rules if rule.matches(query)]
        if not matching:
            return None
        if any(not rule.ports for rule in matching):
            return ()
        return tuple(sorted({port for rule in matching for port in rule.ports}))


OPEN = NetworkPolicy()
