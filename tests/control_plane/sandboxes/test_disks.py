"""A process sandbox is held to its disk, tried as a tenant's agent would fill the host: its
terminal command writes more than the sandbox's disk limit into its workspace. The write stops
at the limit with "No space left on device" in that sandbox alone; the sandbox shows what it
uses; its server and the next tenant go on; deleting it gives the room back. Without the limit
the same write succeeds on this machine's disk, so the test fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from control_plane.sandboxes.provider import PROJECT_DIR
from tests.control_plane.support import ControlPlane, make_config, wait_for
from tests.control_plane.tenants import run
from tests.support.llm import ScriptedLLM

pytestmark = pytest.mark.e2e

LIMIT = 96 * 1024**2
#: Three times the limit, into the workspace; the exit code and the size that landed said.
FILL = f"head -c {3 * LIMIT} /dev/zero > {PROJECT_DIR}/fill; echo written=$?"


def test_a_sandbox_is_held_to_its_disk(tmp_path: Path, llm: ScriptedLLM) -> None:
    if os.geteuid() != 0:
        pytest.fail("a sandbox's filesystem is mounted by root only: run as root")
    plane = ControlPlane(make_config(tmp_path / "cp", sandbox_disk_limit=LIMIT)).start()
    try:
        a = run(plane, llm, "alice", FILL)
        events = a.events()
        assert "No space left on device" in events and "written=1" in events, events
        # What landed is the sandbox's limit at most, and the sandbox shows it.
        landed = int(a.bash(f"wc -c < {PROJECT_DIR}/fill")["stdout"])
        assert LIMIT // 2 < landed <= LIMIT, landed
        disk = a.client.get("/api/v1/sandboxes", params={"id": a.sid}).json()[0]["disk"]
        # (its server's state has a filesystem of a quarter of that besides)
        assert LIMIT * 0.8 < disk["limit"] <= LIMIT * 1.25 and disk["used"] >= landed, disk

        # Its server goes on, full as it is; once it frees room it writes again.
        assert a.bash("echo alive")["stdout"] == "alive\n"
        assert (
            a.bash(f"cd {PROJECT_DIR} && rm fill && echo room > note && cat note")["stdout"]
            == "room\n"
        )
        # The next tenant's sandbox has its own room.
        b = run(plane, llm, "bob", f"head -c {LIMIT // 2} /dev/zero > half; wc -c < half")
        assert f"{LIMIT // 2}" in b.events(), b.events()

        root = plane.config.state_dir / "sandboxes" / a.sid
        assert os.path.ismount(root)
        r = a.client.delete(f"/api/v1/sandboxes/{a.sid}", params={"sandbox_id": a.sid})
        assert r.status_code == 200, r.text
        wait_for(lambda: not root.exists(), 30, what="the sandbox's directory to go")
        assert not [p for p in (plane.config.state_dir / "disks").iterdir() if a.sid in p.name]
    finally:
        plane.stop()
