"""A process sandbox is held to its memory and process count (its cgroup), tried as a tenant's
agent would exhaust the host: it allocates more memory than its sandbox has, and forks without
end. Its sandbox stops it; its server and the next tenant go on. Without the limits, the same
allocation and forks succeed on this machine, so the test fails.

Run both ways a server starts: spawned by bubblewrap, and forked from the template (which
moves the server into the sandbox's groups itself).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import textwrap
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from agent_server.template import Fork
from control_plane.providers.process import cgroups
from core import processes
from tests.control_plane.support import (
    ControlPlane,
    make_config,
    sandbox_pid,
    server_of,
    template_socket,
    wait_for,
)
from tests.control_plane.tenants import run
from tests.support.llm import ScriptedLLM

pytestmark = pytest.mark.e2e

MEMORY = 640 * 1024**2
PIDS = 128
#: gVisor's Sentry and its ptrace stubs are host threads: it needs more to start.
GVISOR_PIDS = 512

#: Fills /tmp with as much as the sandbox's memory (a tenant's build, or an attack), then
#: frees it again.
FILL_TMP = f"head -c {MEMORY} /dev/zero > /tmp/fill; rm -f /tmp/fill"
#: A build's many processes, each smaller than the agent server, more than the sandbox's memory
#: together: each touches 56 MiB, holds it a moment, and their exit codes are printed.
CROWD = textwrap.dedent("""\
    import subprocess, sys
    code = "import time; b = bytearray(56 << 20); b[::4096] = bytes(len(b) >> 12); time.sleep(3)"
    crowd = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(14)]
    print(sorted(p.wait() for p in crowd))
    """)
#: Forks sleepers until fork fails (at most 400), says how many it made, and ends them.
FORKS = textwrap.dedent("""\
    import os, time
    made = []
    for _ in range(400):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        made.append(pid)
    print(len(made))
    for pid in made:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    """)


@pytest.mark.parametrize("forked", [False, True], ids=["spawned", "forked"])
def test_a_sandbox_is_held_to_its_memory_and_processes(
    tmp_path: Path, llm: ScriptedLLM, forked: bool
) -> None:
    if os.geteuid() != 0:
        pytest.fail("cgroups are written by root only: run as root")
    groups = cgroups.find()
    assert isinstance(groups, cgroups.Cgroups), groups
    plane = ControlPlane(
        make_config(
            tmp_path / "cp",
            sandbox_template=forked,
            sandbox_memory_limit=MEMORY,
            sandbox_pids_limit=PIDS,
        )
    ).start()
    try:
        if forked:
            wait_for(template_socket(plane).exists, 180, what="the sandbox template")
        a = run(plane, llm, "alice", "echo ready")
        mine = [parent / a.sid for parent in groups.parents]
        assert all(group.is_dir() for group in mine)
        server = server_of(plane, a.sid)
        held = Path(f"/proc/{server}/cgroup").read_text()
        assert all(f"/{cgroups.GROUP}/{a.sid}\n" in held for _ in mine), held

        hog = a.bash("python3 -c 'b = bytearray(1024 * 1024**2); print(\"allocated\")'")
        assert "allocated" not in hog["stdout"] and hog["exit_code"] != 0, hog
        made = a.bash(f"python3 -c {shlex.quote(FORKS)}")
        assert made["exit_code"] == 0, made
        assert 0 < int(made["stdout"]) < PIDS, made

        # Past its memory, the kernel ends some of the crowd (each smaller than the server:
        # the agent's processes go first), never the server that runs them.
        crowd = a.bash(f"python3 -c {shlex.quote(CROWD)}")
        assert "-9" in crowd["stdout"], crowd

        # /tmp's pages are its memory, held by no process: filled, it is full, not the memory
        # (the kernel would end the largest process, its server).
        full = a.bash(FILL_TMP)
        assert "No space left on device" in full["stderr"], full

        # Its server went on, and so does the next tenant's sandbox.
        assert a.bash("echo alive")["stdout"] == "alive\n"
        b = run(plane, llm, "bob", "echo fine")
        assert b.bash("echo fine too")["stdout"] == "fine too\n"

        r = a.client.delete(f"/api/v1/sandboxes/{a.sid}", params={"sandbox_id": a.sid})
        assert r.status_code == 200, r.text
        wait_for(
            lambda: not any(group.exists() for group in mine), 30, what="the sandbox's groups to go"
        )
    finally:
        plane.stop()


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "/sys/fs/cgroup/../../etc/cgroup.procs",
        "/sys/fs/cgroup/memory/./cgroup.procs",
        "/sys/fs/cgroup/memory/agent-sandboxes/x/tasks",
    ],
)
def test_a_fork_request_has_no_other_file_written(path: str) -> None:
    """The template writes to the groups a fork request names, as root: a control group's
    process list, never another file."""
    with pytest.raises(ValidationError):
        Fork(enter=5, uid=1000, cwd="/", env={}, argv=[], cgroups=[path])
    Fork(
        enter=5,
        uid=1000,
        cwd="/",
        env={},
        argv=[],
        cgroups=["/sys/fs/cgroup/memory/agent-sandboxes/0b5e/cgroup.procs"],
    )


def test_a_gvisor_sandbox_is_held_to_its_memory_and_processes_as_one(
    tmp_path: Path, llm: ScriptedLLM
) -> None:
    """On gVisor the sandbox's cgroup holds runsc's processes, and with them everything the
    sandbox runs. To the host's kernel the sandbox is its Sentry: past its process count (the
    Sentry's threads, one per task on ptrace) or its memory, the whole sandbox ends
    (docs/gvisor.md) and its loss is recorded; the next tenant's goes on."""
    groups = cgroups.find()
    assert isinstance(groups, cgroups.Cgroups), groups
    plane = ControlPlane(
        make_config(
            tmp_path / "cp",
            sandbox_isolation="gvisor",
            sandbox_memory_limit=MEMORY,
            sandbox_pids_limit=GVISOR_PIDS,
        )
    ).start()
    try:
        forker, hog = run(plane, llm, "alice", "echo ready"), run(plane, llm, "mallory", "echo ok")
        neighbour = run(plane, llm, "bob", "echo fine")
        # Its /tmp (gVisor's tmpfs, in the Sentry's memory) fills up, and the sandbox goes on.
        full = neighbour.bash(FILL_TMP)
        assert "No space left on device" in full["stderr"], full
        launcher = sandbox_pid(plane, forker.sid)
        for pid in [launcher, *processes.children(launcher)]:  # runsc, its gofer and Sentry
            held = Path(f"/proc/{pid}/cgroup").read_text()
            assert f"/{cgroups.GROUP}/{forker.sid}\n" in held, held

        for tenant, command in (
            (forker, f"python3 -c {shlex.quote(FORKS)}"),
            (hog, "python3 -c 'b = bytearray(1024 * 1024**2)'"),
        ):
            with contextlib.suppress(httpx.HTTPError, AssertionError):  # its server goes too
                tenant.bash(command)
            wait_for(
                lambda t=tenant: (
                    t.client.get("/api/v1/sandboxes", params={"id": t.sid}).json()[0]["status"]
                    in ("MISSING", "ERROR")
                ),
                60,
                what="the loss recorded",
            )
        assert neighbour.bash("echo fine too")["stdout"] == "fine too\n"
    finally:
        plane.stop()
