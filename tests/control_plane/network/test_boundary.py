"""The boundary's process-sandbox links and rules on this host, with real namespaces, veth
pairs and nftables, on a test deployment's own subnet (no packet is sent)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from control_plane.network.boundary import Boundary
from control_plane.network.fence import Fence
from control_plane.network.host import NetworkError, ip_batch
from control_plane.network.links import Links, veth_of
from control_plane.network.policy import NetworkPolicy
from control_plane.network.rules import Segment
from tests.support.internet import Internet, forget_subnet


async def _no_policy(_: str) -> NetworkPolicy | None:
    return None


@pytest.fixture
async def boundary(tmp_path: Path) -> AsyncIterator[Boundary]:
    subnet = Internet.shared().subnet(str(tmp_path))
    links = Links(subnet)
    segment = Segment(
        tag=f"{int(subnet.network_address):08x}",
        subnet=subnet,
        gateway=links.gateway,
        interfaces=links.interfaces,
        port=None,
        masquerade=True,
    )
    made = Boundary(Fence(segment), links, policy_of=_no_policy, dns_port=0)
    await made.start()
    try:
        yield made
    finally:
        await made.close()
        forget_subnet(subnet)


def table(boundary: Boundary) -> str:
    return subprocess.run(
        ["nft", "list", "table", "inet", boundary.fence.segment.table],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


async def test_a_sandbox_made_again_after_a_stop_half_way_is_removed_whole(
    boundary: Boundary,
) -> None:
    """A control plane stopped while it started a sandbox leaves its link and rules; the next
    one starts the sandbox again (another address). Removing it then leaves nothing of either
    start: before, the first start's rules kept the sandbox's chain and counter in use and
    every removal failed ("Device or resource busy"), its files kept for good."""
    first = await boundary.attach("s0a1", NetworkPolicy(mode="open"))
    again = await boundary.attach("s0a1", NetworkPolicy(mode="none"))
    listing = table(boundary)
    assert str(again.address) in listing
    if again.address != first.address:
        assert str(first.address) not in listing
    await boundary.detach("s0a1")
    listing = table(boundary)
    assert "s0a1" not in listing and str(again.address) not in listing
    assert boundary.links is not None and not boundary.links.has("s0a1")


async def test_rules_left_under_an_address_whose_link_is_gone_are_removed_with_it(
    boundary: Boundary,
) -> None:
    """A start stopped while `nft` let it in: its link is taken back, its rules may stay.
    The sandbox's next start and its removal leave nothing of it; rules with no link at all
    go with a removal too."""
    stray = boundary.fence.segment.subnet.network_address + 78
    await boundary.admit("s0c1", stray, veth_of(stray), NetworkPolicy(mode="open"))
    attached = await boundary.attach("s0c1", NetworkPolicy(mode="none"))
    await boundary.detach("s0c1")
    listing = table(boundary)
    assert "s0c1" not in listing and str(stray) not in listing
    assert str(attached.address) not in listing

    await boundary.admit("s0c2", stray, veth_of(stray), NetworkPolicy(mode="open"))
    await boundary.detach("s0c2")
    assert "s0c2" not in table(boundary)


async def test_an_address_left_behind_is_taken_over_whole(boundary: Boundary) -> None:
    """An address a sandbox held and never gave back (its clean-up did not happen), let in
    for another: the newcomer is judged by its own policy, and the one before is gone."""
    address = boundary.fence.segment.subnet.network_address + 77
    await boundary.admit("s0b1", address, "asbxtest0", NetworkPolicy(mode="open"))
    await boundary.admit("s0b2", address, "asbxtest0", NetworkPolicy(mode="none"))
    listing = table(boundary)
    assert "s_s0b2" in listing and "s0b1" not in listing
    await boundary.release("s0b2", address, "asbxtest0")
    assert "s0b2" not in table(boundary)


async def test_a_restarted_control_planes_fence_knows_the_sandboxes_in_its_table(
    boundary: Boundary,
) -> None:
    """The resolver asks the fence whose a source address is; a fence made anew (the control
    plane restarted, or another of the deployment) reads it from the table. It read nothing
    before (`list map ... counters` is a syntax error in nft's text grammar), and each sandbox
    let in before a restart was refused every name until it was started again."""
    attached = await boundary.attach("s0d1", NetworkPolicy(mode="open"))
    again = Fence(boundary.fence.segment)
    assert await again.who(str(attached.address)) == "s0d1"
    assert await again.address_of("s0d1") == attached.address
    await boundary.detach("s0d1")


async def test_a_crowded_subnet_still_gives_its_last_free_address_and_then_says_it_is_full(
    boundary: Boundary,
) -> None:
    """An address is a random pick claimed by its route, and the routes held are read only
    after a clash: with every address but one held (another control plane's sandboxes), a
    start still gets that one; with none left, it is refused in words."""
    links = boundary.links
    assert links is not None
    hosts = list(links.subnet.hosts())[1:]  # the first is the gateway
    free, held = hosts[len(hosts) // 2], [h for h in hosts if h != hosts[len(hosts) // 2]]
    await ip_batch([f"route add {address}/32 dev {links.holder}" for address in held])
    try:
        attached = await links.attach("s0e1")
        assert attached.address == free
        await links.detach("s0e1")
        await ip_batch([f"route add {free}/32 dev {links.holder}"])
        with pytest.raises(NetworkError, match="no free address"):
            await links.attach("s0e2")
        assert not links.has("s0e2")
    finally:  # the routes this test added, whichever of them are there (a failure's own
        # error is the one seen, not the cleanup's)
        await ip_batch([f"route delete {address}/32" for address in held])
        with contextlib.suppress(NetworkError):
            await ip_batch([f"route delete {free}/32"])
