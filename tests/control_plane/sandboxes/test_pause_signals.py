"""A plain pause (one that does not hibernate) stops every process of a process sandbox, and
its resume continues every one: the server, and what the agent left running in a session of
its own with a clean environment, orphaned (no parent, session or marker of the sandbox's).

Run without isolation and inside bubblewrap, through a control plane (the agent starts the
process); and through the provider alone, with the sandbox's cgroup v2 group (its processes
listed from the group) and without one (found in /proc: a bubblewrap sandbox's pid namespace;
without isolation only the server's process group is signalled then, as before the groups)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from control_plane.config import Config
from control_plane.providers.process import cgroups
from control_plane.providers.process.isolation import Isolation, choose
from control_plane.providers.process.leader import Leader
from core import processes
from tests.control_plane.sandboxes.escaped import as_root, bare, bash, clean_up, left, plane_for
from tests.control_plane.support import ControlPlane, sandbox_pid
from tests.control_plane.tenants import run
from tests.support.llm import ScriptedLLM
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

STOPPED = ("T", "t")


def orphan(mark: str) -> str:
    """A shell in a session of its own, with a clean environment, whose parent has exited;
    the command waits until it is up (in its own session: the command's end sweeps its own)."""
    up = f"{mark}.up"  # in the working directory, which the orphan keeps
    loop = f"sh -c 'touch {up}; while :; do sleep 1; done' {mark}"
    return (
        f"env -i setsid -f {loop} </dev/null >/dev/null 2>&1; "
        f"while [ ! -e {up} ]; do sleep 0.01; done"
    )


def members(sandbox_id: str) -> set[int]:
    """Every process in the sandbox's cgroup v2 group (what the kernel counts as its)."""
    mount = cgroups.v2_root()
    assert mount is not None
    return cgroups.Leaf(mount / cgroups.GROUP / sandbox_id).pids()


def states(pids: set[int]) -> dict[int, str | None]:
    return {pid: processes.state(pid) for pid in pids}


@pytest.fixture(params=["off", "auto"], ids=["unisolated", "bubblewrap"])
def plane(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ControlPlane]:
    with plane_for(request.param, "off", tmp_path) as plane:
        yield plane


def test_a_pause_stops_what_left_the_server_session_and_a_resume_continues_it(
    plane: ControlPlane, llm: ScriptedLLM
) -> None:
    mark = f"paused-{uuid.uuid4().hex}"
    tenant = run(plane, llm, "carol", f"{orphan(mark)}; echo started")
    try:
        [escaped] = wait_for(lambda: left(mark), 10, what="the orphaned process")
        launcher = sandbox_pid(plane, tenant.sid)
        assert escaped.session == escaped.pid and escaped.ppid != launcher, escaped
        inside = members(tenant.sid)
        assert {escaped.pid, launcher} <= inside

        r = tenant.client.post(f"/api/v1/sandboxes/{tenant.sid}/pause")
        assert r.status_code == 200 and r.json()["status"] == "PAUSED", r.text
        # All stopped, the orphan too (and the processes of the sandbox's as it was paused).
        assert processes.state(escaped.pid) in STOPPED
        now = states(members(tenant.sid))
        assert all(state in STOPPED for state in now.values()), now

        r = tenant.client.post(f"/api/v1/sandboxes/{tenant.sid}/resume")
        assert r.status_code == 200, r.text
        wait_for(
            lambda: (
                tenant.client.get("/api/v1/sandboxes", params={"id": tenant.sid}).json()[0][
                    "status"
                ]
                == "RUNNING"
            ),
            30,
            what="RUNNING again",
        )
        now = states(members(tenant.sid) | {escaped.pid})
        assert not any(state in STOPPED for state in now.values()), now
        assert tenant.bash("echo back")["stdout"] == "back\n"
    finally:
        # Deleted: a sandbox the plane's exit stops keeps its disk mounted and its groups.
        tenant.client.delete(f"/api/v1/sandboxes/{tenant.sid}", params={"sandbox_id": tenant.sid})
        clean_up(mark, tenant.sid)


@pytest.mark.parametrize("held", [True, False], ids=["cgroup", "proc"])
@pytest.mark.parametrize("isolated", [False, True], ids=["unisolated", "bubblewrap"])
async def test_the_provider_pauses_with_its_group_or_from_proc(
    tmp_path: Path, held: bool, isolated: bool
) -> None:
    """With the sandbox's cgroup, everything of it is stopped and continued. Without one, a
    bubblewrap sandbox's pid namespace is (read from /proc); an unisolated sandbox has only its
    server's process group signalled, as it had before the groups: the orphan runs on."""
    as_root()
    found = cgroups.find()
    assert isinstance(found, cgroups.Cgroups), found
    groups = found if held else None
    isolation: Isolation | None = None
    if isolated:
        isolation = choose("bubblewrap", hidden=[tmp_path], uids=Config().sandbox_uids)
    provider, launch = bare(tmp_path, groups, isolation)
    mark = f"paused-{uuid.uuid4().hex}"
    handle = await provider.create(launch)
    try:
        async with bash(handle, launch) as client:
            r = await client.post("/execute_bash_command", json={"command": orphan(mark)})
            assert r.status_code == 200, r.text
        [escaped] = wait_for(lambda: left(mark), 10, what="the orphaned process")
        leader = Leader.of(handle).pid
        assert escaped.session == escaped.pid
        assert (cgroups.leaf_of(leader, launch.sandbox_id) is not None) == held

        await provider.pause(handle)
        assert processes.state(leader) in STOPPED
        reached = held or isolated
        assert (processes.state(escaped.pid) in STOPPED) == reached, escaped
        if held:
            now = states(members(launch.sandbox_id))
            assert all(state in STOPPED for state in now.values()), now

        await provider.resume(handle)
        assert processes.state(leader) not in STOPPED
        assert processes.state(escaped.pid) not in STOPPED
        if held:
            now = states(members(launch.sandbox_id))
            assert not any(state in STOPPED for state in now.values()), now
    finally:
        await provider.destroy(launch.sandbox_id, handle, launch.root_dir)
        clean_up(mark, launch.sandbox_id)
        if groups is not None:
            groups.remove(launch.sandbox_id, wait=1)
        await provider.close()
