"""A Docker sandbox is held to its disk, tried as a tenant's agent would fill the Docker host:
its terminal command writes three times the sandbox's disk limit into its workspace. The write
stops at the limit with "No space left on device" in that sandbox alone; the sandbox shows what
it uses; its server and the next tenant go on. A restarted control plane adopts the container
with its disk, and deleting the sandbox then gives every byte back (no mount, image or loop
device left). Without the limit the write lands whole on Docker's disk, so the test fails.

Cold starts and a warm pool's parked containers alike (a parked container's disk is made when
it is parked, and removed when the pool discards it).
"""

from __future__ import annotations

import os
from pathlib import Path

import docker
import pytest

from control_plane.providers.docker.provider import LABEL_PLANE, WORKSPACE, name_of, plane_label
from tests.control_plane.sandboxes.test_docker import docker_config
from tests.control_plane.support import ControlPlane
from tests.control_plane.tenants import run
from tests.support import docker as docker_support
from tests.support.llm import ScriptedLLM
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

LIMIT = 96 * 1024**2
#: Three times the limit, into the workspace; the exit code said.
FILL = f"head -c {3 * LIMIT} /dev/zero > {WORKSPACE}/fill; echo written=$?"


def attached(directory: Path) -> list[str]:
    """The loop devices whose backing file is under `directory`."""
    found = []
    for loop in Path("/sys/block").glob("loop*"):
        try:
            backing = (loop / "loop" / "backing_file").read_text().strip()
        except OSError:
            continue
        if backing.startswith(str(directory)):
            found.append(f"{loop.name}: {backing}")
    return found


def mounted(directory: Path) -> list[str]:
    with open("/proc/self/mountinfo") as mounts:
        return [line for line in mounts if f" {directory}/" in line]


@pytest.mark.parametrize("pool", [0, 2], ids=["cold", "warm-pool"])
def test_a_docker_sandbox_is_held_to_its_disk(
    tmp_path: Path,
    sandbox_image: str,
    bridge_llm: ScriptedLLM,
    engine: docker.DockerClient,
    request: pytest.FixtureRequest,
    pool: int,
) -> None:
    if os.geteuid() != 0:
        pytest.fail("a sandbox's filesystem is mounted by root only: run as root")
    config = docker_config(
        tmp_path / "cp",
        sandbox_image,
        sandbox_disk_limit=LIMIT,
        warm_pool=pool,
        stop_sandboxes_on_exit=False,
    )
    label = f"{LABEL_PLANE}={plane_label(config.db_url)}"
    request.addfinalizer(lambda: docker_support.remove_labelled(engine, label))
    disks = config.state_dir / "disks"
    first = ControlPlane(config).start()
    try:
        if pool:
            wait_for(
                lambda: (
                    list(docker_support.parked(engine, plane_label(config.db_url)).values())
                    == ["running"] * pool
                ),
                60,
                what="the parked containers",
            )
        a = run(first, bridge_llm, "alice", FILL)
        events = a.events()
        assert "No space left on device" in events and "written=1" in events, events
        # What landed is the sandbox's limit at most, and the sandbox shows it.
        landed = int(a.bash(f"wc -c < {WORKSPACE}/fill")["stdout"])
        assert LIMIT // 2 < landed <= LIMIT, landed
        disk = a.client.get("/api/v1/sandboxes", params={"id": a.sid}).json()[0]["disk"]
        # (its server's state has a filesystem of a quarter of that besides)
        assert LIMIT * 0.8 < disk["limit"] <= LIMIT * 1.25 and disk["used"] >= landed, disk
        # Docker's own disk got none of it: the volume binds the sandbox's filesystem.
        volume = engine.volumes.get(name_of(a.sid)).attrs
        assert volume["Options"]["device"] == str(disks / "mounts" / a.sid), volume

        # Its server goes on, full as it is; once it frees room it writes again.
        assert a.bash("echo alive")["stdout"] == "alive\n"
        assert (
            a.bash(f"cd {WORKSPACE} && rm fill && echo room > note && cat note")["stdout"]
            == "room\n"
        )
        # The next tenant's sandbox has its own room.
        b = run(first, bridge_llm, "bob", f"head -c {LIMIT // 2} /dev/zero > half; wc -c < half")
        assert f"{LIMIT // 2}" in b.events(), b.events()
    finally:
        first.stop()

    # A control plane started again adopts the containers with their disks; deleting a
    # sandbox gives all of its disk back.
    second = ControlPlane(config.model_copy(update={"stop_sandboxes_on_exit": True})).start()
    try:
        client = second.client(str(a.client.headers["Authorization"]).removeprefix("Bearer "))
        record = client.get("/api/v1/sandboxes", params={"id": a.sid}).json()[0]
        assert record["status"] == "RUNNING" and record["disk"]["limit"] == disk["limit"], record
        assert a.bash(f"cat {WORKSPACE}/note")["stdout"] == "room\n"
        r = client.delete(f"/api/v1/sandboxes/{a.sid}", params={"sandbox_id": a.sid})
        assert r.status_code == 200, r.text
        wait_for(
            lambda: not [p for p in disks.iterdir() if a.sid in p.name],
            30,
            what="the sandbox's images to go",
        )
        assert not (disks / "mounts" / a.sid).exists()
        assert not [m for m in mounted(disks) if a.sid in m]
        # A mount the container's namespace still held as it went was unmounted lazily: its
        # loop device is released with that namespace, moments later.
        wait_for(
            lambda: not [loop for loop in attached(disks) if a.sid in loop],
            30,
            what="the sandbox's loop devices released",
        )
        assert b.bash("echo still here")["stdout"] == "still here\n"
    finally:
        second.stop()
    # Stopped with its sandboxes (and its pool): nothing of any disk is left.
    assert engine.volumes.list(filters={"label": label}) == []
    wait_for(lambda: not attached(disks), 30, what="every loop device to be detached")
    assert mounted(disks) == [] and not list(disks.glob("*.ext4"))
