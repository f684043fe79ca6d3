"""This host's side of the boundary: iproute2's `ip` and nftables' `nft`, run as the tools
made for the job (never a netlink or firewall layer of our own), and what this host's own
networks are.

Each call is one process and, for `nft -f -`, one kernel transaction: a script applies whole
or not at all. The commands run on the event loop as subprocesses (they take milliseconds);
their error output is what a failure says.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import shutil
from pathlib import Path
from typing import Any

#: A command that hangs (a kernel lock held elsewhere) is not waited for beyond this.
TIMEOUT = 30.0
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


class NetworkError(Exception):
    """A network command failed; the message is its own error output."""


async def run(argv: list[str], stdin: str = "") -> str:
    """`argv` with `stdin`, its output; NetworkError with its error output when it fails."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        raise NetworkError(f"{argv[0]}: {exc.strerror}") from None
    try:
        out, err = await asyncio.wait_for(
            process.communicate(stdin.encode() if stdin else None), TIMEOUT
        )
    except TimeoutError:
        process.kill()
        await process.wait()
        raise NetworkError(f"{' '.join(argv[:3])} did not finish within {TIMEOUT:g} s") from None
    if process.returncode != 0:
        text = err.decode(errors="replace").strip() or out.decode(errors="replace").strip()
        raise NetworkError(f"{' '.join(argv[:4])}: {text[:2000]}")
    return out.decode(errors="replace")


async def nft(script: str) -> None:
    """One nftables transaction."""
    if script:
        await run(["nft", "-f", "-"], script)


async def nft_json(*args: str) -> list[dict[str, Any]]:
    """`nft -j <args>`'s objects (an empty list for nothing found)."""
    items = json.loads(await run(["nft", "-j", *args]) or "{}").get("nftables", [])
    return [item for item in items if isinstance(item, dict)]


async def nft_list(kind: str, family: str, table: str, name: str) -> list[dict[str, Any]]:
    """One object of a table listed (`nft -j list <kind> ...`), asked in nftables' JSON:
    the text grammar reads some names as keywords (`list map inet t counters` is a syntax
    error), the JSON one takes any name. The question goes as an argument: nft opens
    `/dev/stdin` by name for JSON, which fails where stdin is a socket (uvloop's pipes)."""
    command = {"nftables": [{"list": {kind: {"family": family, "table": table, "name": name}}}]}
    out = await run(["nft", "-j", json.dumps(command)])
    items = json.loads(out or "{}").get("nftables", [])
    return [item for item in items if isinstance(item, dict)]


async def ip_batch(lines: list[str], netns: str | None = None) -> None:
    """`ip -batch -`, in the named network namespace when given: stops at the first failure."""
    await run(["ip", *(["-n", netns] if netns else []), "-batch", "-"], "\n".join(lines) + "\n")


async def ip_json(*args: str) -> list[dict[str, Any]]:
    found = json.loads(await run(["ip", "-j", *args]) or "[]")
    return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []


def missing_tools() -> list[str]:
    """The programs the boundary needs that this host lacks (Debian packages named)."""
    needs = {"ip": "iproute2", "nft": "nftables", "nsenter": "util-linux"}
    return [package for tool, package in needs.items() if shutil.which(tool) is None]


def forwarding() -> bool:
    """Whether this host forwards IPv4 (sandboxes' traffic beyond it needs that)."""
    try:
        return IP_FORWARD.read_text().strip() == "1"
    except OSError:
        return False


def enable_forwarding() -> None:
    IP_FORWARD.write_text("1\n")


async def own_networks(excluding: str) -> list[ipaddress.IPv4Network]:
    """This host's IPv4 addresses and the networks it sits on directly (its LAN, a cloud's
    private subnet, a Docker bridge): what a sandbox must never reach, beside the ranges that
    are blocked everywhere. `excluding`: interface names (nftables' `name*` form) of the
    sandboxes' own side, which are not the host's networks."""
    prefix = excluding.rstrip("*")
    found: set[ipaddress.IPv4Network] = set()
    for link in await ip_json("-4", "addr", "show"):
        name = str(link.get("ifname", ""))
        if name.startswith(prefix) if excluding.endswith("*") else name == excluding:
            continue
        for info in link.get("addr_info", []):
            try:
                interface = ipaddress.IPv4Interface(f"{info['local']}/{info['prefixlen']}")
            except (KeyError, ValueError):
                continue
            found.add(ipaddress.IPv4Network(f"{interface.ip}/32"))
            if interface.network.prefixlen < 32:
                found.add(interface.network)
    return sorted(found, key=lambda n: (n.network_address, n.prefixlen))
