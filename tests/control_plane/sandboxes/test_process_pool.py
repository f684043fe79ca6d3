"""The process provider's warm pool (control_plane/providers/process/parking.py) for real: a
start claims a sandbox whose server was forked from the template ahead of it, and that sandbox
is as isolated as a fresh one (test_isolation's tenant and pause-resume-delete tests, run on
claimed ones); its network is its user's policy, not the parked one's (test_network's open
case runs on claimed ones too). Parked sandboxes end with their control plane, however it
ends, and the next one removes what is left of them; one whose server died gives way to a
cold start."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from control_plane.providers.process.isolation import READY_FILE
from control_plane.providers.process.start import LOG_FILE
from core import processes
from core.procfs import ProcessInfo
from tests.control_plane.planes import PlaneProcess
from tests.control_plane.sandboxes import test_isolation
from tests.control_plane.support import (
    OPERATOR,
    ControlPlane,
    configure_llm,
    make_config,
    wait_for,
    wait_task,
    warm_pool,
)
from tests.control_plane.tenants import run
from tests.support.llm import ScriptedLLM, call

pytestmark = pytest.mark.e2e

SIZE = 2


def parked_ids(state_dir: Path) -> set[str]:
    marks = state_dir / "parked"
    return set(os.listdir(marks)) if marks.is_dir() else set()


def running(state_dir: Path, sandbox_id: str) -> list[ProcessInfo]:
    """The processes of a sandbox (its launcher and holder carry its ready file's path)."""
    return processes.with_argument(str(state_dir / "sandboxes" / sandbox_id / READY_FILE))


@pytest.fixture
def pooled(tmp_path: Path) -> Iterator[ControlPlane]:
    """A control plane whose template forks, with a pool of SIZE, once that many are parked."""
    if os.geteuid() != 0:
        pytest.fail("the template forks into a sandbox's namespaces as root only: run as root")
    plane = ControlPlane(
        make_config(tmp_path / "cp", sandbox_template=True, warm_pool=SIZE, operator_key=OPERATOR)
    ).start()
    wait_for(lambda: warm_pool(plane.url)["parked"] == SIZE, 180, what="the parked sandboxes")
    yield plane
    plane.stop()


def test_a_claimed_sandbox_is_as_isolated_as_a_fresh_one(
    pooled: ControlPlane, llm: ScriptedLLM
) -> None:
    parked = parked_ids(pooled.config.state_dir)
    test_isolation.test_a_tenant_reads_nothing_of_another(pooled, llm)
    assert warm_pool(pooled.url) | {"parked": 0} == {"parked": 0, "hit": 2, "miss": 0}
    directories = os.listdir(pooled.config.state_dir / "sandboxes")
    claimed = {d for d in directories if d.isalnum()} - parked_ids(pooled.config.state_dir)
    assert claimed and claimed <= parked  # the tenants' sandboxes are ones that were parked


def test_a_claimed_server_rehearsed_and_its_tenant_finds_nothing_of_it(
    pooled: ControlPlane, llm: ScriptedLLM
) -> None:
    """A parked server creates a conversation of its own while it waits for its keys
    (`agent_server.rehearsal`); its tenant's sandbox holds nothing of it: one conversation (its
    own), nothing of it in /tmp nor in the server's state."""
    tenant = run(pooled, llm, "carol", "echo ran")
    assert warm_pool(pooled.url)["hit"] == 1
    sandbox = pooled.config.state_dir / "sandboxes" / tenant.sid
    log = (sandbox / LOG_FILE).read_text()
    assert log.count("rehearsal: first conversation created") == 1, log[-2000:]
    assert "rehearsal" not in log.replace("rehearsal: first conversation created", ""), log
    assert "rehearsal" not in tenant.bash("ls -A /tmp")["stdout"]
    listed = httpx.get(
        tenant.url + "/api/conversations/search",
        headers={"X-Session-API-Key": tenant.session},
        timeout=10,
    ).json()["items"]
    assert [c["id"].replace("-", "") for c in listed] == [tenant.cid.replace("-", "")]
    assert not list((sandbox / "state").rglob("*rehearsal*"))


def test_a_claimed_sandbox_pauses_resumes_and_deletes_everything_inside(
    pooled: ControlPlane, llm: ScriptedLLM
) -> None:
    test_isolation.test_pause_resume_and_delete_reach_everything_inside(pooled, llm)
    assert warm_pool(pooled.url)["hit"] >= 1


def test_a_parked_server_that_died_gives_way_to_a_cold_start(
    pooled: ControlPlane, llm: ScriptedLLM
) -> None:
    state = pooled.config.state_dir
    for sandbox_id in parked_ids(state):
        for found in running(state, sandbox_id):
            processes.signal_group(found.pgid, signal.SIGKILL)
    client = pooled.client(pooled.new_user("alice"))
    configure_llm(client, llm.base_url("cold"))
    llm.script("cold", call("finish", message="started anyway"))
    body = {"initial_message": {"content": [{"type": "text", "text": "go"}], "run": True}}
    task = wait_task(client, client.post("/api/v1/app-conversations", json=body).json()["id"])
    assert task["status"] == "READY", task
    cid = task["app_conversation_id"]
    wait_for(
        lambda: (
            "started anyway"
            in client.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 100}).text
        ),
        60,
        what="the agent's answer",
    )


def test_parked_sandboxes_end_with_their_control_plane_and_the_next_removes_them(
    tmp_path: Path, llm: ScriptedLLM
) -> None:
    if os.geteuid() != 0:
        pytest.fail("the template forks into a sandbox's namespaces as root only: run as root")
    state = tmp_path / "cp"
    plane = PlaneProcess(
        state, sandbox_template="true", warm_pool=str(SIZE), operator_key=OPERATOR
    ).start()
    try:
        wait_for(lambda: warm_pool(plane.url)["parked"] == SIZE, 180, what="parked sandboxes")
        first = parked_ids(state)
        with httpx.Client(
            base_url=plane.url,
            timeout=30,
            headers={"Authorization": f"Bearer {plane.new_key('alice')}"},
        ) as client:
            configure_llm(client, llm.base_url("kept"))
            llm.script("kept", call("finish", message="pooled and done"))
            body = {"initial_message": {"content": [{"type": "text", "text": "go"}], "run": True}}
            task = wait_task(
                client, client.post("/api/v1/app-conversations", json=body).json()["id"]
            )
            assert task["status"] == "READY", task
            sid = task["sandbox_id"]
            assert sid in first  # a parked sandbox, now this one's

            # SIGKILLed: the keys' pipes it held close, so the parked servers read no keys
            # and exit, and their sandboxes with them; the claimed sandbox lives on.
            left = first - {sid}
            plane.kill()
            wait_for(lambda: not any(running(state, p) for p in left), 60, what="the parked to end")
            assert running(state, sid)

            plane.start()  # removes what is left of them, and adopts the sandbox
            mounts = Path("/proc/mounts").read_text()
            for gone in left:
                assert not (state / "sandboxes" / gone).exists()
                assert gone not in parked_ids(state) and gone not in mounts
            sandbox = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
            assert sandbox["status"] == "RUNNING", sandbox
    finally:
        plane.stop()
