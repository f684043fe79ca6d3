"""A process sandbox's end leaves nothing of it running, whatever its agent started: a process
in a session of its own with a clean environment (no marker of the sandbox), orphaned by a
double fork (no parent of the sandbox's any more) and ignoring SIGTERM. The kernel keeps it in
the sandbox's cgroup; nothing in /proc links it to the sandbox once its parent is gone.

Run with the kinds a host has: without isolation (where such a process is nobody's child but
the host's init) and inside bubblewrap; ended by a delete and by a pause that hibernates. And
through the provider alone, with the sandbox's cgroup and without one, where the stop reads
/proc instead (and finds a command of the server's that ignores SIGTERM among the server's
descendants, taken while the server lives)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from control_plane.providers.process import cgroups
from core import processes
from tests.control_plane.sandboxes.escaped import as_root, bare, bash, clean_up, left, plane_for
from tests.control_plane.support import ControlPlane, sandbox_pid, wait_for
from tests.control_plane.tenants import run
from tests.support.llm import ScriptedLLM

pytestmark = pytest.mark.e2e


def escapes(mark: str) -> str:
    """What the agent runs: two processes that leave its session, its environment and its
    ancestry; one ignores SIGTERM, the other's child forks again on it."""
    ignores = f"env -i setsid -f sh -c 'trap \"\" TERM; while :; do sleep 1; done' {mark}-deaf"
    forks = (
        "env -i setsid -f sh -c "
        f'\'trap "setsid -f sh -c \\"sleep 600\\" {mark}-late" TERM; sleep 600 & wait\' '
        f"{mark}-fork"
    )
    quiet = "</dev/null >/dev/null 2>&1"
    return f"{ignores} {quiet}; {forks} {quiet}; echo started"


@pytest.fixture(params=["off", "auto"], ids=["unisolated", "bubblewrap"])
def plane(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ControlPlane]:
    with plane_for(request.param, "always", tmp_path) as plane:
        yield plane


@pytest.mark.parametrize("end", ["delete", "hibernate"])
def test_an_end_leaves_no_process_of_the_sandbox(
    plane: ControlPlane, llm: ScriptedLLM, end: str
) -> None:
    mark = f"escaped-{uuid.uuid4().hex}"
    tenant = run(plane, llm, "carol", escapes(mark))
    try:
        wait_for(lambda: len(left(mark)) >= 2, 10, what="the escaped processes")
        launcher = sandbox_pid(plane, tenant.sid)
        for found in left(mark):
            # Each leads a session of its own, without the sandbox's marker in its
            # environment, orphaned: yet in the sandbox's cgroup.
            assert found.session == found.pid and found.ppid != launcher, found
            held = Path(f"/proc/{found.pid}/cgroup").read_text()
            assert f"/{cgroups.GROUP}/{tenant.sid}\n" in held, held

        if end == "delete":
            r = tenant.client.delete(
                f"/api/v1/sandboxes/{tenant.sid}", params={"sandbox_id": tenant.sid}
            )
        else:
            r = tenant.client.post(f"/api/v1/sandboxes/{tenant.sid}/pause", timeout=90)
        assert r.status_code == 200, r.text

        assert not left(mark), left(mark)
        assert processes.state(launcher) is None  # reaped: no zombie
    finally:
        clean_up(mark, tenant.sid)


@pytest.mark.parametrize("held", [True, False], ids=["cgroup", "proc"])
async def test_a_stop_ends_what_left_the_server_session(tmp_path: Path, held: bool) -> None:
    """The provider alone (no isolation), its server running a command in the background (in
    a session of its own) that ignores SIGTERM: a destroy leaves nothing of it, with the
    sandbox's cgroup or without one (its stop then reads /proc, and finds the command among
    the server's descendants while the server lives). With the cgroup, also a process
    orphaned in a session of its own with a clean environment: nothing in /proc names it as
    the sandbox's (no parent of its, no session, no marker), and without the cgroup it is
    left running."""
    as_root()
    found = cgroups.find()
    assert isinstance(found, cgroups.Cgroups), found
    groups = found if held else None
    provider, launch = bare(tmp_path, groups)
    mark = f"escaped-{uuid.uuid4().hex}"

    def deaf(name: str) -> str:
        """A shell that ignores SIGTERM (it says so in a file once it does)."""
        up = launch.root_dir / f"{name}.up"
        return f"sh -c 'trap \"\" TERM; touch {up}; while :; do sleep 1; done' {mark}-{name}"

    def until_up(name: str) -> str:
        return f"while [ ! -e {launch.root_dir / name}.up ]; do sleep 0.01; done"

    handle = await provider.create(launch)
    try:
        async with bash(handle, launch) as client:
            r = await client.post("/start_bash_command", json={"command": deaf("child")})
            assert r.status_code == 200, r.text
            if held:  # orphaned once its command ends, which waits until it ignores SIGTERM
                orphan = f"env -i setsid -f {deaf('orphan')} </dev/null >/dev/null 2>&1"
                r = await client.post(
                    "/execute_bash_command", json={"command": f"{orphan}; {until_up('orphan')}"}
                )
                assert r.status_code == 200, r.text
        wait_for(lambda: len(left(mark)) == (2 if held else 1), 10, what="the processes")
        wait_for(lambda: (launch.root_dir / "child.up").exists(), 10, what="the command")
        leader = int(handle.ref.partition(":")[0])
        assert (cgroups.leaf_of(leader, launch.sandbox_id) is not None) == held
        assert all(p.session == p.pid for p in left(mark))

        await provider.destroy(launch.sandbox_id, handle, launch.root_dir)

        assert not left(mark), left(mark)
        assert processes.state(leader) is None  # reaped: no zombie
        assert not any((parent / launch.sandbox_id).exists() for parent in found.parents)
    finally:
        clean_up(mark, launch.sandbox_id)
        if groups is not None:
            groups.remove(launch.sandbox_id, wait=1)
        await provider.close()
