"""The nftables rules of a sandbox segment, as text for `nft -f -` (pure: nothing here runs).

One table per segment (`inet as_<tag>`), evaluated beside whatever else the host has (Docker's
tables among them): a packet refused here is refused, whatever another table says.

- `input` (hook input): a sandbox reaches this host only on the segment's gateway address, and
  there only the control plane's sandbox-side port and the resolver's port 53;
- `forward` (hook forward): what a sandbox sends beyond this host goes through the verdict
  map `policies`, keyed by its address and interface (so an address is only believed on the
  interface it belongs to); a sandbox missing from it is refused; nothing from elsewhere starts
  a connection into a sandbox;
- a chain per sandbox (`s_<sandbox>`, where the map sends its traffic for its whole life):
  `goto open` (every destination but the `blocked` set), `goto refuse` (`none`), or its
  allowlist: its sets of resolved addresses (with their ports) and listed networks, TCP only;
  a policy change replaces that chain's rules and empties the sets in one transaction;
- `refuse`: counted per sandbox (the named counter `r_<sandbox>`, through the map `counters`
  keyed by its address), remembered for ten minutes in `recent` (source, destination, protocol,
  port: what the sandbox's agent is told), then refused at once: a TCP reset, an ICMP
  administratively-prohibited for anything else (never a silent drop that hangs a client);
- `postrouting` (process segments): the sandboxes' addresses masqueraded to the host's.

The skeleton (`skeleton`) is replaced as a whole in one transaction whenever a control plane
starts; the maps, sets and counters that hold sandboxes are created if missing and otherwise
left alone, so a second control plane of the deployment, or a restart, loses no sandbox.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from dataclasses import dataclass

from control_plane.network.policy import NetworkPolicy

#: How long a refusal stays listed in `recent`, and how many are kept (the oldest go).
RECENT_SECONDS = 600
RECENT_SIZE = 8192
#: Addresses one allowlisted sandbox's resolved names may add (the set is bounded: a sandbox
#: that resolves without end cannot grow the kernel's memory).
ALLOWED_SIZE = 4096
#: Longest and shortest life of an address admitted by a resolved name (its TTL, within these):
#: long enough for clients that cache answers past their TTL, bounded all the same.
ADMIT_MIN_SECONDS = 600
ADMIT_MAX_SECONDS = 86400
DOCKER_USER = "DOCKER-USER"


@dataclass(frozen=True)
class Segment:
    """Where one provider's sandboxes sit on this host, as the rules see it."""

    tag: str
    """Names the table (`as_<tag>`): unique per segment on a host."""
    subnet: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address
    """This host's address on the segment: the only one of its addresses a sandbox reaches."""
    interfaces: str
    """The sandboxes' side of this host, as nftables matches interface names (`asbx*`, or a
    Docker network's bridge `br-0123456789ab`)."""
    port: int | None
    """The control plane's sandbox-side port on the gateway (webhook, LLM gateway); None
    where the control plane is another host (a swarm node's segment)."""
    masquerade: bool
    """Translate the sandboxes' addresses on their way out (a Docker network's own rules do
    it for containers)."""
    control_plane: tuple[ipaddress.IPv4Address, int] | None = None
    """The control plane elsewhere (address, port), reached whatever a sandbox's policy (a
    swarm node's sandboxes post their webhook and call the LLM gateway there)."""

    @property
    def table(self) -> str:
        return f"as_{self.tag}"


def _set(addresses: Iterable[ipaddress.IPv4Network]) -> str:
    return ", ".join(
        str(a) for a in sorted(set(addresses), key=lambda n: (n.network_address, n.prefixlen))
    )


def skeleton(segment: Segment, blocked: Iterable[ipaddress.IPv4Network]) -> str:
    """The table, made or refreshed: its static chains replaced, its sandboxes kept."""
    t, s = segment.table, segment
    forward_in = f'iifname "{s.interfaces}" ip saddr {s.subnet}'
    lines = [
        f"add table inet {t}",
        f"add set inet {t} blocked {{ type ipv4_addr; flags interval; auto-merge; }}",
        f"flush set inet {t} blocked",
        f"add element inet {t} blocked {{ {_set(blocked)} }}",
        f"add map inet {t} policies {{ type ipv4_addr . ifname : verdict; }}",
        f"add map inet {t} counters {{ type ipv4_addr : counter; }}",
        # Each control plane of the deployment on this host adds its port (none takes
        # another's away): a sandbox reaches whichever started it.
        f"add set inet {t} control_planes {{ type inet_service; }}",
        *([f"add element inet {t} control_planes {{ {s.port} }}"] if s.port else []),
        f"add set inet {t} recent {{ type ipv4_addr . ipv4_addr . inet_proto . inet_service; "
        f"flags dynamic, timeout; timeout {RECENT_SECONDS}s; size {RECENT_SIZE}; }}",
    ]
    chains = {
        "input": "type filter hook input priority filter - 5; policy accept;",
        "forward": "type filter hook forward priority filter - 5; policy accept;",
        "from_sandbox": None,
        "to_host": None,
        "into_sandbox": None,
        "open": None,
        "none": None,
        "refuse": None,
    }
    # Every name a sandbox asks is asked of its resolver, whatever server it names (a
    # program's own 8.8.8.8, the host's resolver Docker copied in): answered by its policy.
    chains["prerouting"] = "type nat hook prerouting priority dstnat; policy accept;"
    if s.masquerade:
        chains["postrouting"] = "type nat hook postrouting priority srcnat; policy accept;"
    for chain, hook in chains.items():
        lines.append(f"add chain inet {t} {chain}" + (f" {{ {hook} }}" if hook else ""))
        lines.append(f"flush chain inet {t} {chain}")
    rules = {
        # An address is believed only on the link it lives on, and IPv6 (no address on a
        # sandbox's link) not at all; these hold for every segment sharing the interface names
        # (each deployment's table judges its own subnet alone, never another's).
        "input": [
            f'iifname "{s.interfaces}" fib saddr . iif oif missing drop',
            f'iifname "{s.interfaces}" meta nfproto ipv6 drop',
            f'iifname "{s.interfaces}" ip saddr {s.subnet} jump to_host',
        ],
        "to_host": [
            "ct state established,related accept",
            f"ip daddr {s.gateway} tcp dport @control_planes accept",
            f"ip daddr {s.gateway} meta l4proto {{ tcp, udp }} th dport 53 accept",
            f"ip daddr {s.gateway} icmp type echo-request accept",
            "goto refuse",
        ],
        "prerouting": [
            f"{forward_in} meta l4proto {{ tcp, udp }} th dport 53 dnat ip to {s.gateway}:53"
        ],
        "forward": [
            f'iifname "{s.interfaces}" fib saddr . iif oif missing drop',
            f'iifname "{s.interfaces}" meta nfproto ipv6 drop',
            f"{forward_in} jump from_sandbox",
            f'oifname "{s.interfaces}" ip daddr {s.subnet} jump into_sandbox',
        ],
        "from_sandbox": [
            "ct state established,related accept",
            *(
                [f"ip daddr {s.control_plane[0]} tcp dport {s.control_plane[1]} accept"]
                if s.control_plane
                else []
            ),
            "ip saddr . iifname vmap @policies",
            "goto refuse",  # not one of ours (yet): nothing
        ],
        # Replies to what a sandbox opened pass, and what comes through a port Docker
        # publishes (its agent server's: how a swarm's control plane reaches it); nothing else
        # starts a connection into one through this host (another sandbox, the outside). This
        # host itself (output) may: the control plane reaches each process sandbox's server.
        "into_sandbox": ["ct state established,related accept", "ct status dnat accept", "drop"],
        "open": ["ip daddr @blocked goto refuse", "accept"],
        "none": ["goto refuse"],
        "refuse": [
            # `update`: each refusal of the same destination starts its ten minutes again, so
            # the time left says how long ago it last was.
            "meta l4proto { tcp, udp } update @recent "
            "{ ip saddr . ip daddr . meta l4proto . th dport }",
            "counter name ip saddr map @counters",
            "meta l4proto tcp reject with tcp reset",
            "reject with icmpx admin-prohibited",
        ],
    }
    if s.masquerade:
        rules["postrouting"] = [f'ip saddr {s.subnet} oifname != "{s.interfaces}" masquerade']
    for chain, body in rules.items():
        lines += [f"add rule inet {t} {chain} {rule}" for rule in body]
    return "\n".join(lines) + "\n"


def chain_name(sandbox_id: str) -> str:
    return f"s_{sandbox_id}"


def counter_name(sandbox_id: str) -> str:
    return f"r_{sandbox_id}"


def _sets(sandbox_id: str) -> dict[str, str]:
    """The allowlist's sets of one sandbox, by name, with their definitions (always the same:
    `add` of an existing set is then a no-op, never an error)."""
    return {
        f"h_{sandbox_id}": f"{{ type ipv4_addr; flags timeout; size {ALLOWED_SIZE}; }}",
        f"hp_{sandbox_id}": (
            f"{{ type ipv4_addr . inet_service; flags timeout; size {ALLOWED_SIZE}; }}"
        ),
        f"n_{sandbox_id}": "{ type ipv4_addr; flags interval; auto-merge; }",
        f"np_{sandbox_id}": "{ type ipv4_addr . inet_service; flags interval; }",
    }


def _objects(t: str, sandbox_id: str, address: ipaddress.IPv4Address, interface: str) -> list[str]:
    """A sandbox's own objects, made where missing (each `add` is a no-op on what exists):
    its chain, the policies map's element sending its traffic there (the same for its whole
    life, so never replaced), its counter and its sets."""
    chain, counter = chain_name(sandbox_id), counter_name(sandbox_id)
    return [
        f"add chain inet {t} {chain}",
        f"add counter inet {t} {counter}",
        *(
            f"add set inet {t} {name} {definition}"
            for name, definition in _sets(sandbox_id).items()
        ),
        f'add element inet {t} counters {{ {address} : "{counter}" }}',
        f'add element inet {t} policies {{ {address} . "{interface}" : goto {chain} }}',
    ]


def admit(
    segment: Segment,
    sandbox_id: str,
    address: ipaddress.IPv4Address,
    interface: str,
    policy: NetworkPolicy,
) -> str:
    """A sandbox into the table under `policy`, or its policy replaced: the same text does
    both, in one transaction (connections already open go on; new ones meet the new policy)."""
    t, chain = segment.table, chain_name(sandbox_id)
    elements, body = _policy(t, sandbox_id, policy)
    lines = [
        *_objects(t, sandbox_id, address, interface),
        f"flush chain inet {t} {chain}",
        *(f"flush set inet {t} {name}" for name in _sets(sandbox_id)),
        *elements,
    ]
    lines += [f"add rule inet {t} {chain} {rule}" for rule in body]
    return "\n".join(lines) + "\n"


def lift(segment: Segment, sandbox_id: str, policy: NetworkPolicy) -> str:
    """A sandbox let in under `none` and nothing since (a parked one: its chain holds that one
    rule, its sets are empty) put under `policy` by additions alone: the policy's rules go
    before the one it held, which is never reached again (every policy's rules end in a
    verdict). A transaction that deletes a rule or an element waits for the kernel's grace
    period (~16 ms here), one that only adds does not (~4 ms): this is a claimed start's
    step. A later change of policy (`admit`) flushes the chain, that rule with it."""
    t, chain = segment.table, chain_name(sandbox_id)
    elements, body = _policy(t, sandbox_id, policy)
    # `insert` puts a rule first in the chain: the last one is inserted first.
    inserts = [f"insert rule inet {t} {chain} {rule}" for rule in reversed(body)]
    return "\n".join([*elements, *inserts]) + "\n"


def _policy(t: str, sandbox_id: str, policy: NetworkPolicy) -> tuple[list[str], list[str]]:
    """The elements `policy` adds to a sandbox's sets, and its chain's rules (the last of them
    a verdict, whatever the policy)."""
    if policy.mode == "open":
        return [], ["goto open"]
    if policy.mode == "none":
        return [], ["goto refuse"]
    hosts, host_ports, nets, net_ports = _sets(sandbox_id)
    rules = [
        "ip daddr @blocked goto refuse",
        "meta l4proto != tcp goto refuse",
        f"ip daddr @{hosts} accept",
        f"ip daddr . tcp dport @{host_ports} accept",
        f"ip daddr @{nets} accept",
        f"ip daddr . tcp dport @{net_ports} accept",
        "goto refuse",
    ]
    networks = [r for r in policy.rules if r.network is not None]
    whole = [str(r.network) for r in networks if not r.ports]
    ported = [f"{r.network} . {port}" for r in networks for port in r.ports]
    elements = []
    if whole:
        elements.append(f"add element inet {t} {nets} {{ {', '.join(whole)} }}")
    if ported:
        elements.append(f"add element inet {t} {net_ports} {{ {', '.join(ported)} }}")
    return elements, rules


def admit_resolved(
    segment: Segment,
    sandbox_id: str,
    addresses: Iterable[ipaddress.IPv4Address],
    ports: tuple[int, ...],
    ttl: int,
) -> str:
    """Addresses a listed name resolved to, let through for a while (`ADMIT_*_SECONDS`)."""
    life = min(max(ttl, ADMIT_MIN_SECONDS), ADMIT_MAX_SECONDS)
    hosts, host_ports, _, _ = _sets(sandbox_id)
    if ports:
        elements, name = (
            [f"{a} . {p} timeout {life}s" for a in addresses for p in ports],
            host_ports,
        )
    else:
        elements, name = [f"{a} timeout {life}s" for a in addresses], hosts
    if not elements:
        return ""
    return f"add element inet {segment.table} {name} {{ {', '.join(elements)} }}\n"


def release(
    segment: Segment, sandbox_id: str, address: ipaddress.IPv4Address, interface: str
) -> str:
    """Everything of a sandbox out of the table: made first where missing (an `add` of what
    exists changes nothing), so deleting never fails on what was already gone."""
    t = segment.table
    lines = [
        *_objects(t, sandbox_id, address, interface),
        f'delete element inet {t} policies {{ {address} . "{interface}" }}',
        f"delete element inet {t} counters {{ {address} }}",
        f"delete counter inet {t} {counter_name(sandbox_id)}",
        f"flush chain inet {t} {chain_name(sandbox_id)}",
        f"delete chain inet {t} {chain_name(sandbox_id)}",
        *(f"delete set inet {t} {name}" for name in _sets(sandbox_id)),
    ]
    return "\n".join(lines) + "\n"


def forget(segment: Segment, keys: Iterable[tuple[str, str]], counted: Iterable[str]) -> str:
    """Elements of the policies map (address, interface) and of the counters map (address)
    out of the table, as `nft -j` listed them."""
    t = segment.table
    lines = [
        f'delete element inet {t} policies {{ {address} . "{interface}" }}'
        for address, interface in keys
    ]
    lines += [f"delete element inet {t} counters {{ {address} }}" for address in counted]
    return "".join(f"{line}\n" for line in lines)


def docker_user(segment: Segment) -> str:
    """Docker's `DOCKER-USER` chain accepting the segment's forwarded traffic (this table has
    judged it already): where Docker runs, its FORWARD chain drops whatever it does not know,
    and DOCKER-USER is where Docker lets a host add to it. Made if Docker has not yet; Docker
    keeps what it finds there."""
    rule = (
        f'iifname "{segment.interfaces}" ip saddr {segment.subnet} accept comment "{segment.table}"'
    )
    back = (
        f'oifname "{segment.interfaces}" ip daddr {segment.subnet} accept comment "{segment.table}"'
    )
    return (
        f"add table ip filter\nadd chain ip filter {DOCKER_USER}\n"
        f"insert rule ip filter {DOCKER_USER} {rule}\ninsert rule ip filter {DOCKER_USER} {back}\n"
    )


def has_docker_user_rules(listing: str, segment: Segment) -> bool:
    """Whether `nft -j list chain ip filter DOCKER-USER` shows this segment's rules."""
    try:
        items = json.loads(listing).get("nftables", [])
    except ValueError:
        return False
    return sum(1 for item in items if item.get("rule", {}).get("comment") == segment.table) >= 2
