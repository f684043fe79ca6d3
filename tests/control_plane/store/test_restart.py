"""The control plane SIGKILLed mid start task and mid run, then restarted on the same state:
tasks complete or end ERROR, running sandboxes are adopted (same process), vanished ones are
MISSING, and not one event is lost or stored twice. A start carried on after a restart that
then fails leaves no sandbox behind."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from control_plane.store.tables import start_tasks
from core import processes
from tests.control_plane.planes import PlaneProcess, kill_sandboxes, query, sandbox_pids
from tests.control_plane.support import (
    ControlPlane,
    configure_llm,
    make_config,
    wait_task,
)
from tests.support.llm import ScriptedLLM, call
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[PlaneProcess]:
    (tmp_path / "cp").mkdir()
    server = PlaneProcess(tmp_path / "cp").start()
    yield server
    server.stop()
    kill_sandboxes(tmp_path / "cp")


def test_killed_mid_start_and_mid_run(plane: PlaneProcess, llm: ScriptedLLM, key: str) -> None:
    api_key = plane.new_key("alice")
    assert api_key.startswith("cp_") and len(api_key) > 40
    with httpx.Client(
        base_url=plane.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30
    ) as client:
        run_and_kill(plane, client, llm, key)


def run_and_kill(plane: PlaneProcess, client: httpx.Client, llm: ScriptedLLM, key: str) -> None:
    configure_llm(client, llm.base_url(key), tools=["terminal"])
    slow = call("terminal", command="echo two")
    slow.delay = 2.0
    llm.script(key, call("terminal", command="echo one"), slow, call("finish", message="done"))

    body: dict[str, Any] = {
        "initial_message": {"content": [{"type": "text", "text": "go"}], "run": True}
    }
    running = wait_task(client, client.post("/api/v1/app-conversations", json=body).json()["id"])
    assert running["status"] == "READY"
    cid, sid = running["app_conversation_id"], running["sandbox_id"]
    try:
        wait_for(
            lambda: (
                client.get(
                    f"/api/v1/conversation/{cid}/events/count", params={"kind__eq": "ActionEvent"}
                ).json()
                >= 1
            ),
            30,
            what="the run's first action, stored",
        )
    except AssertionError as exc:  # (twice in CI, unexplained) where did the run stand?
        try:
            where = where_the_run_is(client, sid, cid, llm, key)
        except Exception as unread:  # the timeout stays the failure, whatever the look met
            where = f"where the run stood could not be read ({unread!r})"
        raise AssertionError(f"{exc}; {where}") from None
    doomed = wait_task(client, client.post("/api/v1/app-conversations", json={}).json()["id"])
    doomed_pid = sandbox_pids(plane.state_dir)[doomed["sandbox_id"]]
    # The control plane's own settings (its database, its secret key) never reach a sandbox.
    environ = Path(f"/proc/{doomed_pid}/environ").read_bytes().split(b"\0")
    assert not [e for e in environ if e.startswith(b"CONTROL_PLANE_")]
    assert any(e.startswith(b"AGENT_SERVER_WEBHOOK_URL=") for e in environ)
    pids_before = sandbox_pids(plane.state_dir)

    # Mid run (the model is answering its slow reply) and mid start: SIGKILL.
    pending = client.post("/api/v1/app-conversations", json={}).json()["id"]
    plane.kill()
    processes.signal_group(doomed_pid, signal.SIGKILL)  # a sandbox that vanishes while it is down
    time.sleep(0.5)
    plane.start()

    task = wait_task(client, pending, timeout=60)
    assert task["status"] in ("READY", "ERROR"), task
    if task["status"] == "ERROR":
        assert task["detail"]
    sandbox = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
    assert sandbox["status"] == "RUNNING"
    assert sandbox_pids(plane.state_dir)[sid] == pids_before[sid]  # adopted, not restarted
    gone = client.get("/api/v1/sandboxes", params={"id": doomed["sandbox_id"]}).json()[0]
    assert gone["status"] == "MISSING"

    # The run finishes; every event of the agent server's log is stored exactly once.
    wait_for(
        lambda: (
            client.get("/api/v1/app-conversations", params={"ids": cid}).json()[0][
                "execution_status"
            ]
            == "finished"
        ),
        60,
        what="the run",
    )
    agent = httpx.get(
        f"{sandbox['exposed_urls'][0]['url']}/api/conversations/{cid}/events/search",
        params={"limit": 1000},
        headers={"X-Session-API-Key": sandbox["session_api_key"]},
    )
    expected = [e["id"] for e in agent.json()["items"]]

    def stored() -> list[str] | None:
        items = client.get(
            f"/api/v1/conversation/{cid}/events/search", params={"limit": 1000}
        ).json()["items"]
        ids = [e["id"] for e in items]
        return ids if len(ids) >= len(expected) else None

    ids = wait_for(stored, 90, interval=0.5, what="the webhook to catch up")
    assert ids == expected and len(set(ids)) == len(ids)
    actions = [e for e in agent.json()["items"] if e["kind"] == "ActionEvent"]
    # The slow reply's call goes through the LLM gateway, this control plane: killed while the
    # model answers, the call is tried again and takes the script's next reply. Two steps or
    # three, the last the finish.
    assert len(actions) in (2, 3) and actions[-1]["tool_name"] == "finish", actions


def test_a_start_taken_over_that_fails_removes_the_sandbox_it_made(tmp_path: Path) -> None:
    """A start placed (its sandbox made) by one control plane and carried on by the next after
    a stop: when it then fails (its repository cannot be cloned), the sandbox made for it goes
    too, though the process that ended it is not the one that made it."""
    config = make_config(
        tmp_path / "cp",
        stop_sandboxes_on_exit=False,
        repository_url_template=f"file://{tmp_path}/forge/{{repository}}.git",
    )
    first = ControlPlane(config).start()
    user = first.new_user("erin")
    client = first.client(user)
    configure_llm(client, "http://127.0.0.1:9/v1")  # never reached: the clone fails first
    body = {
        "selected_repository": "acme/absent",
        "initial_message": {"content": [{"type": "text", "text": "go"}], "run": True},
    }
    task_id = client.post("/api/v1/app-conversations", json=body).json()["id"]

    def stage() -> str:
        found: str = client.get(
            "/api/v1/app-conversations/start-tasks", params={"ids": task_id}
        ).json()[0]["status"]
        return found

    wait_for(lambda: stage() == "WAITING_FOR_SANDBOX", 30, interval=0.005, what="the placement")
    first.stop()  # mid-start: placed, its sandbox booting
    [placed] = query(config.db_url, select(start_tasks).where(start_tasks.c.id == task_id))
    assert placed.status not in ("READY", "ERROR") and placed.made_sandbox, placed
    sid = placed.sandbox_id

    second = ControlPlane(config.model_copy(update={"stop_sandboxes_on_exit": True})).start()
    try:
        client = second.client(user)
        task = wait_task(client, task_id)
        assert task["status"] == "ERROR" and "acme/absent could not be cloned" in task["detail"]
        record = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
        assert (record["status"], record["status_reason"]) == ("MISSING", "START_FAILED"), record
        assert record["conversation_count"] == 0
        assert (
            client.get("/api/v1/sandboxes/search", params={"status": "RUNNING"}).json()["items"]
            == []
        )
        # Its agent server is gone and its directory too (the workspace archived).
        assert not [
            pid
            for pid in sandbox_pids(config.state_dir).values()
            if processes.state(pid) not in (None, "Z")
        ]
        assert not (config.state_dir / "sandboxes" / sid).exists()
        assert (config.state_dir / "archives" / f"{sid}.tar.gz").exists()
    finally:
        second.stop()


def where_the_run_is(
    client: httpx.Client, sandbox_id: str, cid: str, llm: ScriptedLLM, key: str
) -> str:
    """What the agent server itself holds of the run, beside what the control plane stored
    and the model was asked: a run stalled in the sandbox (its model's answer never ended),
    against events made there that never reached the control plane."""
    sandbox = client.get("/api/v1/sandboxes", params={"id": sandbox_id}).json()[0]
    url = f"{sandbox['exposed_urls'][0]['url']}/api/conversations/{cid}"
    headers = {"X-Session-API-Key": sandbox["session_api_key"]}
    there = httpx.get(url, headers=headers, timeout=10).json()
    events = httpx.get(
        f"{url}/events/search", params={"limit": 1000}, headers=headers, timeout=10
    ).json()["items"]
    stored = client.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 1000})
    return (
        f"in the sandbox: {there.get('execution_status')}, "
        f"{[e['kind'] for e in events][-8:]}; "
        f"stored: {[e['kind'] for e in stored.json()['items']][-8:]}; "
        f"model calls answered: {len(llm.timings.get(key, []))}"
    )
