"""Lifecycle timers (SPEC 3.1, 8) proven by moving the clock: idle pause, the 12-hour cap, and
deletion of what stayed paused beyond the deletion time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from control_plane.sandboxes import procfs
from core.retry import Clock
from tests.control_plane.support import (
    ControlPlane,
    configure_llm,
    make_config,
    sandbox_pid,
    start,
    wait_for,
)
from tests.support.llm import ScriptedLLM, call

pytestmark = pytest.mark.e2e


class MovableClock(Clock):
    """Real time plus an offset the test moves forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return super().time() + self.offset


def status(client, sandbox_id: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    return client.get("/api/v1/sandboxes", params={"id": sandbox_id}).json()[0]


def settle(client, cid: str) -> None:  # type: ignore[no-untyped-def]
    """Until the webhook has delivered what the agent server had (each batch is activity)."""
    def count() -> int:
        n: int = client.get(f"/api/v1/conversation/{cid}/events/count").json()["count"]
        return n
    seen = -1
    while (n := count()) != seen:
        seen = n
        time.sleep(0.6)  # longer than the agent server's batch window


@pytest.fixture
def clock() -> MovableClock:
    return MovableClock()


def plane(tmp_path: Path, clock: MovableClock, **config: object) -> Iterator[ControlPlane]:
    server = ControlPlane(make_config(tmp_path / "cp", lifecycle_interval=0.1, **config), clock).start()
    yield server
    server.stop()


@pytest.fixture
def timed(tmp_path: Path, clock: MovableClock) -> Iterator[ControlPlane]:
    yield from plane(tmp_path, clock, idle_seconds=60, deletion_seconds=3600)


@pytest.fixture
def capped(tmp_path: Path, clock: MovableClock) -> Iterator[ControlPlane]:
    yield from plane(tmp_path, clock, idle_seconds=None, deletion_seconds=None)


def test_idle_pause_resume_and_deletion(timed: ControlPlane, clock: MovableClock, llm: ScriptedLLM,
                                        key: str) -> None:
    client = timed.client(timed.new_user("alice"))
    configure_llm(client, llm.base_url(key))
    task = start(client)
    cid, sid = task["app_conversation_id"], task["sandbox_id"]
    pid = sandbox_pid(timed, sid)
    settle(client, cid)

    clock.offset = 30
    with pytest.raises(AssertionError):
        wait_for(lambda: status(client, sid)["status"] == "PAUSED", 0.5)
    clock.offset = 61
    record = wait_for(lambda: (s := status(client, sid))["status"] == "PAUSED" and s, 5)
    assert "idle" in record["status_detail"] and procfs.state(pid) == "T"

    # Activity: a message resumes the sandbox and resets the idle timer.
    llm.script(key, call("finish", message="ok"))
    r = client.post(f"/api/v1/app-conversations/{cid}/send-message",
                    json={"content": [{"type": "text", "text": "hi"}], "run": True})
    assert r.status_code == 200 and status(client, sid)["status"] == "RUNNING"
    wait_for(lambda: client.get("/api/v1/app-conversations", params={"ids": cid})
             .json()[0]["execution_status"] == "FINISHED", 30)
    settle(client, cid)

    # Paused again; past the deletion time it is gone for good, with its conversation.
    clock.offset = 61 + 61
    wait_for(lambda: status(client, sid)["status"] == "PAUSED", 5)
    clock.offset = 61 + 61 + 3601
    wait_for(lambda: status(client, sid)["status"] == "MISSING", 10)
    wait_for(lambda: procfs.state(pid) in (None, "Z"), 10, what="the agent server to end")
    assert client.get("/api/v1/app-conversations", params={"ids": cid}).json() == [None]
    assert client.get(f"/api/v1/conversation/{cid}/events/search").status_code == 404
    assert client.post(f"/api/v1/sandboxes/{sid}/resume").status_code == 410


def test_the_12_hour_cap_pauses_even_an_active_sandbox(capped: ControlPlane, clock: MovableClock,
                                                       llm: ScriptedLLM, key: str) -> None:
    client = capped.client(capped.new_user("bob"))
    configure_llm(client, llm.base_url(key))
    sid = start(client)["sandbox_id"]
    clock.offset = 11 * 3600
    with pytest.raises(AssertionError):
        wait_for(lambda: status(client, sid)["status"] == "PAUSED", 0.5)
    clock.offset = 12 * 3600 + 1
    record = wait_for(lambda: (s := status(client, sid))["status"] == "PAUSED" and s, 5)
    assert "12-hour" in record["status_detail"]
    # Resuming opens a new window.
    assert client.post(f"/api/v1/sandboxes/{sid}/resume").json()["status"] == "RUNNING"
    with pytest.raises(AssertionError):
        wait_for(lambda: status(client, sid)["status"] == "PAUSED", 0.5)
