"""Hibernation (`CONTROL_PLANE_SANDBOX_HIBERNATION`), as a user and an attacker see it: a
hibernated sandbox has no process left (its agent's background processes included) and so
holds no memory; it is PAUSED to every client, and its resume starts a server on its files
that keeps every event, goes on with the run the pause stopped between two steps, and is as
isolated as a fresh sandbox (its uid, its network namespace, its seccomp filter)."""

from __future__ import annotations

import os
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.providers.process.environment import ready_marker
from tests.control_plane.sandboxes.test_lifecycle import ROUND, FrozenClock, rounds
from tests.control_plane.support import (
    ControlPlane,
    configure_llm,
    conversation,
    make_config,
    start,
)
from tests.support.llm import ScriptedLLM, call
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e


def processes_of(root_dir: Path) -> list[int]:
    """Every process on this host carrying the sandbox's mark in its environment (each
    process of a sandbox does, its agent's shells and background processes too)."""
    marker = ready_marker(root_dir)
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(int(entry.name))
        except OSError:
            continue  # ended while we looked, or a kernel thread
    return found


def record(client: httpx.Client, sid: str) -> dict[str, Any]:
    found: dict[str, Any] = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
    return found


def events(client: httpx.Client, cid: str) -> list[dict[str, Any]]:
    r = client.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 1000})
    items: list[dict[str, Any]] = r.json()["items"]
    return items


def observations(client: httpx.Client, cid: str) -> list[str]:
    """What each terminal command printed, in order."""
    said = []
    for e in events(client, cid):
        if e["kind"] == "ObservationEvent":
            content = e["observation"].get("content") or []
            said.append("".join(str(part.get("text", "")) for part in content))
    return said


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    # Every pause hibernates (the timers' pauses do by default).
    config = make_config(tmp_path / "cp", sandbox_hibernation="always", pause_grace=30)
    server = ControlPlane(config).start()
    yield server
    server.stop()


def test_a_hibernated_sandbox_runs_nothing_and_its_resume_goes_on(
    plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    client = plane.client(plane.new_user("alice"))
    configure_llm(client, llm.base_url(key), tools=["terminal"])
    # The model answers the second step slowly: the run is in flight when the pause comes,
    # and the agent server stops it between the second step and the third.
    slow = call("terminal", command="echo held")
    slow.delay = 5.0
    llm.script(
        key,
        # A background process of the agent's, and a file in the workspace.
        call("terminal", command="(sleep 600 &) ; echo kept > kept.txt ; echo started"),
        slow,
        call("terminal", command="cat kept.txt; id -u; grep Seccomp: /proc/self/status"),
        call("finish", message="done"),
    )
    task = start(client, "go")
    assert task["status"] == "READY", task
    cid, sid = task["app_conversation_id"], task["sandbox_id"]
    root = plane.config.state_dir / "sandboxes" / sid
    wait_for(lambda: len(llm.requests_for(key)) >= 2, 60, what="the second step asked for")
    before = processes_of(root)
    assert before, "a running sandbox's processes carry its mark"
    uid_before = os.stat(root / "workspace").st_uid

    r = client.post(f"/api/v1/sandboxes/{sid}/pause", timeout=90)
    assert r.status_code == 200 and r.json()["status"] == "PAUSED", r.text
    assert len(llm.requests_for(key)) == 2  # paused between steps, not cut

    # Nothing of it runs: the server, its shells, the agent's background `sleep` are gone.
    wait_for(lambda: not processes_of(root), 10, what="every process of the sandbox ended")
    assert record(client, sid)["status"] == "PAUSED"
    # Nor a mount, nor a loop device: its disk's image is kept, unmounted.
    assert str(root) not in Path("/proc/mounts").read_text()
    assert list((plane.config.state_dir / "disks").glob(f"{sid}*.ext4"))
    kept = [e["id"] for e in events(client, cid)]
    # The reconciler's rounds leave it alone (no process to find is not a vanished sandbox).
    time.sleep(plane.config.health_interval * 3)
    assert record(client, sid)["status"] == "PAUSED"

    # Resumed: a new server on its files, every event kept, the paused run goes on.
    r = client.post(f"/api/v1/sandboxes/{sid}/resume")
    assert r.status_code == 200 and r.json()["status"] == "RUNNING", r.text
    wait_for(
        lambda: conversation(client, cid)["execution_status"] == "finished",
        60,
        what="the run to go on to its end",
    )
    wait_for(lambda: len(observations(client, cid)) >= 3, 30, what="the last step's events")
    after = [e["id"] for e in events(client, cid)]
    assert after[: len(kept)] == kept
    said = observations(client, cid)
    assert "held" in said[1]
    # As isolated as before: its own uid, the seccomp filter, its file still there.
    last = said[2].split()
    assert last[0] == "kept" and int(last[1]) == uid_before and "2" in last[2:]
    assert processes_of(root), "the resumed sandbox runs again"
    assert len(llm.requests_for(key)) == 4

    # Deleted while hibernated: its workspace is archived from its disk all the same.
    r = client.post(f"/api/v1/sandboxes/{sid}/pause", timeout=90)
    assert r.status_code == 200 and str(root) not in Path("/proc/mounts").read_text()
    deleted = client.delete(f"/api/v1/sandboxes/{sid}", params={"sandbox_id": sid})
    assert deleted.status_code == 200, deleted.text
    with tarfile.open(plane.config.state_dir / "archives" / f"{sid}.tar.gz") as archive:
        [kept_file] = [m for m in archive.getmembers() if m.name.endswith("/kept.txt")]
        assert archive.extractfile(kept_file).read() == b"kept\n"  # type: ignore[union-attr]


def test_the_idle_timer_hibernates_by_default_and_a_message_wakes_it(
    tmp_path: Path, llm: ScriptedLLM, key: str
) -> None:
    clock = FrozenClock()
    config = make_config(tmp_path / "cp", lifecycle_interval=ROUND, idle_seconds=60)
    assert config.sandbox_hibernation == "idle"
    plane = ControlPlane(config, clock).start()
    try:
        client = plane.client(plane.new_user("bob"))
        configure_llm(client, llm.base_url(key), tools=["terminal"])
        llm.script(
            key,
            call("finish", message="first"),
            call("terminal", command="echo awake"),
            call("finish", message="second"),
        )
        task = start(client, "go")
        cid, sid = task["app_conversation_id"], task["sandbox_id"]
        root = plane.config.state_dir / "sandboxes" / sid
        wait_for(lambda: conversation(client, cid)["execution_status"] == "finished", 60)
        assert processes_of(root)

        clock.offset = 61
        paused = wait_for(lambda: (s := record(client, sid))["status"] == "PAUSED" and s, 30)
        assert paused["status_reason"] == "IDLE"
        wait_for(lambda: not processes_of(root), 10, what="its processes ended")
        rounds()
        assert record(client, sid)["status"] == "PAUSED"

        # A message resumes it (SPEC 3.1): a new server, the same conversation going on.
        r = client.post(
            f"/api/v1/app-conversations/{cid}/send-message",
            json={"content": [{"type": "text", "text": "again"}], "run": True},
        )
        assert r.status_code == 200, r.text
        assert record(client, sid)["status"] == "RUNNING"
        wait_for(lambda: "awake" in "".join(observations(client, cid)), 60, what="the new run")
    finally:
        plane.stop()
