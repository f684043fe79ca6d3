"""Lifecycle timers (SPEC 3.1, 8) proven to the millisecond with a clock that only moves when the
test moves it: idle pause (and reads resetting it), the 12-hour cap pausing a run in flight
cleanly, deletion of what stayed paused beyond the deletion time, and drift (a sandbox failing
its health check past the grace period is ERROR, read-only)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import Engine

from control_plane.lifecycle import duration
from control_plane.store.tables import sandboxes
from core import processes
from core.retry import Clock
from tests.control_plane.planes import query
from tests.control_plane.support import (
    ControlPlane,
    configure_llm,
    make_config,
    sandbox_pid,
    start,
)
from tests.support.llm import ScriptedLLM, call
from tests.support.wait import wait_for

#: The reconciler's round in these tests; `rounds()` waits for several of them.
ROUND = 0.05


class FrozenClock(Clock):
    """Stored times and timers read this: it stands still until the test moves it."""

    def __init__(self) -> None:
        self.base = float(int(time.time()))  # a whole second: deadlines compare exactly
        self.offset = 0.0

    def time(self) -> float:
        return self.base + self.offset

    def at(self, seconds: float) -> datetime:
        return datetime.fromtimestamp(self.base, UTC) + timedelta(seconds=seconds)


def rounds() -> None:
    """Long enough for several reconciler rounds to have looked at every sandbox."""
    time.sleep(ROUND * 8)


def sandbox(client: httpx.Client, sandbox_id: str) -> dict[str, Any]:
    found: dict[str, Any] = client.get("/api/v1/sandboxes", params={"id": sandbox_id}).json()[0]
    return found


def moment(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def notices(client: httpx.Client, cid: str) -> list[tuple[str, str]]:
    """The sandbox_status notices in a conversation's events: (status, reason)."""
    items = client.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 1000}).json()[
        "items"
    ]
    return [
        (e["value"]["status"], e["value"]["reason"])
        for e in items
        if e["kind"] == "ConversationStateUpdateEvent" and e["key"] == "sandbox_status"
    ]


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


def plane(tmp_path: Path, clock: Clock, **config: object) -> Iterator[ControlPlane]:
    """The timers' pauses freeze here (their hibernation is test_hibernation's)."""
    config = {"sandbox_hibernation": "off", **config}
    server = ControlPlane(
        make_config(tmp_path / "cp", lifecycle_interval=ROUND, **config), clock
    ).start()
    yield server
    server.stop()


@pytest.fixture
def timed(tmp_path: Path, clock: FrozenClock) -> Iterator[ControlPlane]:
    yield from plane(tmp_path, clock, idle_seconds=60, deletion_seconds=3600)


@pytest.fixture
def capped(tmp_path: Path, clock: FrozenClock) -> Iterator[ControlPlane]:
    yield from plane(tmp_path, clock, idle_seconds=None, deletion_seconds=None, pause_grace=20)


@pytest.fixture
def watched(tmp_path: Path, clock: FrozenClock) -> Iterator[ControlPlane]:
    yield from plane(tmp_path, clock, idle_seconds=None, health_grace=30)


@pytest.mark.e2e
def test_idle_pause_reads_reset_it_and_deletion(
    timed: ControlPlane, clock: FrozenClock, llm: ScriptedLLM, key: str
) -> None:
    client = timed.client(timed.new_user("alice"))
    configure_llm(client, llm.base_url(key))
    task = start(client)
    cid, sid = task["app_conversation_id"], task["sandbox_id"]
    pid = sandbox_pid(timed, sid)
    record = sandbox(client, sid)
    assert moment(record["pause_at"]) == clock.at(60) and record["delete_at"] is None

    clock.offset = 59.999
    rounds()
    assert sandbox(client, sid)["status"] == "RUNNING"
    # A read through the application interface is activity: the idle time starts again.
    assert client.get(f"/api/v1/conversation/{cid}/events/search").status_code == 200
    assert moment(sandbox(client, sid)["pause_at"]) == clock.at(119.999)
    clock.offset = 60
    rounds()
    assert sandbox(client, sid)["status"] == "RUNNING"
    clock.offset = 119.998  # so is a workspace read (through the sandbox)
    assert client.get(f"/api/v1/app-conversations/{cid}/git/changes").status_code in (200, 404)
    assert moment(sandbox(client, sid)["pause_at"]) == clock.at(179.998)
    clock.offset = 179.997
    rounds()
    assert sandbox(client, sid)["status"] == "RUNNING"

    clock.offset = 179.998
    record = wait_for(lambda: (s := sandbox(client, sid))["status"] == "PAUSED" and s, 30)
    assert record["status_reason"] == "IDLE" and record["status_detail"] == "idle for 1 min"
    assert processes.state(pid) == "T"  # frozen: its CPU is released
    assert record["pause_at"] is None and moment(record["delete_at"]) == clock.at(3779.998)
    assert notices(client, cid) == [("PAUSED", "IDLE")]
    # Reading the transcript of a paused sandbox does not hold its deletion off.
    assert client.get(f"/api/v1/conversation/{cid}/events/count").status_code == 200
    assert moment(sandbox(client, sid)["delete_at"]) == clock.at(3779.998)

    clock.offset = 3779.997
    rounds()
    assert sandbox(client, sid)["status"] == "PAUSED"
    clock.offset = 3779.998
    record = wait_for(lambda: (s := sandbox(client, sid))["status"] == "MISSING" and s, 10)
    assert record["status_reason"] == "DELETION_TIME"
    wait_for(lambda: processes.state(pid) in (None, "Z"), 10, what="the agent server to end")
    root = timed.config.state_dir / "sandboxes" / sid
    wait_for(lambda: not root.exists(), 10, what="its storage to go too")
    # Deleted for good: no conversation, no events, no resume.
    assert client.get("/api/v1/app-conversations", params={"ids": cid}).json() == [None]
    assert client.get(f"/api/v1/conversation/{cid}/events/search").status_code == 404
    assert (
        client.post(
            f"/api/v1/app-conversations/{cid}/send-message",
            json={"content": [{"type": "text", "text": "hi"}]},
        ).status_code
        == 404
    )
    assert client.post(f"/api/v1/sandboxes/{sid}/resume").status_code == 410


@pytest.mark.e2e
def test_a_message_resumes_an_idle_sandbox_and_is_activity(
    timed: ControlPlane, clock: FrozenClock, llm: ScriptedLLM, key: str
) -> None:
    client = timed.client(timed.new_user("amy"))
    configure_llm(client, llm.base_url(key))
    task = start(client)
    cid, sid = task["app_conversation_id"], task["sandbox_id"]

    def idle_until_paused() -> bool:
        """The clock at the sandbox's pause time, as often as it moves: the new conversation's
        first events may reach the webhook after the clock has moved (activity, under load)."""
        record = sandbox(client, sid)
        due = moment(record["pause_at"])
        if due is not None:
            clock.offset = max(clock.offset, (due - clock.at(0)).total_seconds())
        return bool(record["status"] == "PAUSED")

    wait_for(idle_until_paused, 30, what="the idle pause")
    clock.offset += 40
    resumed_at = clock.offset
    llm.script(key, call("finish", message="ok"))
    r = client.post(
        f"/api/v1/app-conversations/{cid}/send-message",
        json={"content": [{"type": "text", "text": "hi"}], "run": True},
    )
    assert r.status_code == 200
    record = sandbox(client, sid)
    assert record["status"] == "RUNNING" and record["status_reason"] == "USER"
    assert moment(record["pause_at"]) == clock.at(resumed_at + 60)
    assert notices(client, cid) == [("PAUSED", "IDLE"), ("RUNNING", "USER")]


@pytest.mark.e2e
def test_the_12_hour_cap_pauses_a_run_in_flight_cleanly(
    capped: ControlPlane, clock: FrozenClock, llm: ScriptedLLM, key: str
) -> None:
    client = capped.client(capped.new_user("bob"))
    configure_llm(client, llm.base_url(key), tools=["terminal"])
    slow = call("terminal", command="echo two")
    slow.delay = 2.0
    llm.script(key, call("terminal", command="echo one"), slow, call("finish", message="done"))
    task = start(client, "go")
    cid, sid = task["app_conversation_id"], task["sandbox_id"]
    pid = sandbox_pid(capped, sid)
    assert moment(sandbox(client, sid)["pause_at"]) == clock.at(12 * 3600)

    def actions() -> int:
        n: int = client.get(
            f"/api/v1/conversation/{cid}/events/count", params={"kind__eq": "ActionEvent"}
        ).json()
        return n

    wait_for(lambda: actions() >= 1, 30, what="the first step")
    clock.offset = 12 * 3600 - 0.001
    rounds()
    assert sandbox(client, sid)["status"] == "RUNNING"

    # The model is answering its slow reply: the run is in flight when the cap comes.
    clock.offset = 12 * 3600
    record = wait_for(lambda: (s := sandbox(client, sid))["status"] == "PAUSED" and s, 30)
    assert record["status_reason"] == "SESSION_CAP" and "12-hour" in record["status_detail"]
    assert processes.state(pid) == "T"
    assert notices(client, cid) == [("PAUSED", "SESSION_CAP")]
    # Paused between steps, not cut: the second step finished, the third never began.
    llm_calls = len(llm.requests_for(key))
    assert llm_calls == 2

    # Resuming opens a new 12-hour window, and the run goes on to its end.
    clock.offset = 13 * 3600
    r = client.post(f"/api/v1/sandboxes/{sid}/resume")
    assert r.status_code == 200 and r.json()["status"] == "RUNNING"
    assert moment(r.json()["pause_at"]) == clock.at(25 * 3600)
    wait_for(
        lambda: (
            client.get("/api/v1/app-conversations", params={"ids": cid}).json()[0][
                "execution_status"
            ]
            == "finished"
        ),
        30,
        what="the run to finish",
    )
    wait_for(lambda: actions() == 3, 30, what="the webhook to bring every step")
    items = client.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 1000}).json()[
        "items"
    ]
    kinds = [e["kind"] for e in items]
    # The agent server's own PauseEvent, between the second step and the third.
    assert kinds.index("PauseEvent") < [i for i, k in enumerate(kinds) if k == "ActionEvent"][2]
    assert notices(client, cid) == [("PAUSED", "SESSION_CAP"), ("RUNNING", "USER")]
    clock.offset = 25 * 3600 - 0.001
    rounds()
    assert sandbox(client, sid)["status"] == "RUNNING"


@pytest.mark.e2e
def test_failing_health_checks_past_the_grace_make_it_error_and_read_only(
    watched: ControlPlane, clock: FrozenClock, llm: ScriptedLLM, key: str
) -> None:
    client = watched.client(watched.new_user("carl"))
    configure_llm(client, llm.base_url(key))
    task = start(client)
    cid, sid = task["app_conversation_id"], task["sandbox_id"]
    pid = sandbox_pid(watched, sid)

    def seen_hung_since() -> datetime | None:
        """When the reconciler first found it not answering (None: answering)."""
        [(since,)] = query(
            watched.config.db_url, select(sandboxes.c.unhealthy_since).where(sandboxes.c.id == sid)
        )
        return since  # type: ignore[no-any-return]

    # Hung (stopped by someone else): it does not answer. Better again before the grace ends.
    # Each step waits until a round has seen it (a round may be waiting for an /alive answer
    # that never comes, for its whole timeout), so the grace counts from where the test says.
    processes.signal_group(pid, signal.SIGSTOP)
    wait_for(lambda: seen_hung_since() == clock.at(0), 10, what="the hang to be seen")
    clock.offset = 29.999
    rounds()
    assert sandbox(client, sid)["status"] == "RUNNING"
    processes.signal_group(pid, signal.SIGCONT)
    wait_for(lambda: seen_hung_since() is None, 10, what="the recovery to be seen")
    # Hung again: the grace starts again from here.
    clock.offset = 40
    processes.signal_group(pid, signal.SIGSTOP)
    wait_for(lambda: seen_hung_since() == clock.at(40), 10, what="the new hang to be seen")
    clock.offset = 69.999
    rounds()
    assert sandbox(client, sid)["status"] == "RUNNING"
    clock.offset = 70
    record = wait_for(lambda: (s := sandbox(client, sid))["status"] == "ERROR" and s, 10)
    assert record["status_reason"] == "UNHEALTHY" and "30 s" in record["status_detail"]
    wait_for(lambda: processes.state(pid) in (None, "Z"), 10, what="the hung server to be ended")

    # Read-only (SPEC 3.1, 7): 409 for ERROR; the transcript stays.
    r = client.post(
        f"/api/v1/app-conversations/{cid}/send-message",
        json={"content": [{"type": "text", "text": "x"}]},
    )
    assert r.status_code == 409 and "read-only" in r.json()["detail"]
    assert (
        client.get(f"/api/v1/app-conversations/{cid}/file", params={"path": "a"}).status_code == 409
    )
    assert client.post(f"/api/v1/sandboxes/{sid}/resume").status_code == 409
    assert client.post(f"/api/v1/sandboxes/{sid}/pause").status_code == 409
    assert client.post("/api/v1/app-conversations", json={"sandbox_id": sid}).status_code == 409
    assert client.get(f"/api/v1/app-conversations/{cid}/download").status_code == 200
    assert notices(client, cid) == [("ERROR", "UNHEALTHY")]


@pytest.mark.e2e
def test_a_sandbox_that_answers_is_looked_at_without_a_write(
    watched: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    """Every round looks at every live sandbox; one that answers as its record says has
    nothing to record, and its look writes nothing of its own. Its lease, taken and given back
    for each look, was two writes a look: what 500 idle sandboxes made the busiest work of a
    control plane asked nothing, and what several control planes send one PostgreSQL."""
    client = watched.client(watched.new_user("dora"))
    configure_llm(client, llm.base_url(key))
    sid = start(client)["sandbox_id"]
    leased: list[str] = []

    def written(
        conn: object, cursor: object, statement: str, parameters: Any, *rest: object
    ) -> None:
        if "leases" in statement and sid in repr(parameters):
            if not statement.lstrip().upper().startswith("SELECT"):
                leased.append(statement)

    def claimed() -> datetime:
        """When the next round may take it (each round's claim moves it on)."""
        [(after,)] = query(
            watched.config.db_url, select(sandboxes.c.reconcile_after).where(sandboxes.c.id == sid)
        )
        return after  # type: ignore[no-any-return]

    seen = {claimed()}

    def rounds_seen() -> int:
        seen.add(claimed())
        return len(seen) - 1

    event.listen(Engine, "before_cursor_execute", written)
    try:
        wait_for(lambda: rounds_seen() >= 4, 10, what="four more rounds")
    finally:
        event.remove(Engine, "before_cursor_execute", written)
    assert sandbox(client, sid)["status"] == "RUNNING"
    assert leased == []


@pytest.mark.e2e
def test_idle_and_deletion_times_cannot_be_set_per_conversation(
    control_plane: ControlPlane,
) -> None:
    client = control_plane.client(control_plane.new_user("dora"))
    for field in ("idle_seconds", "deletion_seconds"):
        r = client.post("/api/v1/app-conversations", json={field: 5})
        assert r.status_code == 422, r.text
        error = r.json()["detail"][0]
        assert error["loc"] == ["body", field] and "deployment-wide" in error["msg"]
    # The served document says so: only null is accepted for them.
    document = httpx.get(control_plane.url + "/openapi.json").json()
    body = document["paths"]["/api/v1/app-conversations"]["post"]["requestBody"]["content"][
        "application/json"
    ]["schema"]
    if "$ref" in body:  # the request model is a component of its own
        body = document["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
    for field in ("idle_seconds", "deletion_seconds"):
        assert body["properties"][field]["type"] == "null"
    assert client.post("/api/v1/app-conversations", json={"idle_seconds": None}).status_code == 201


def test_durations_read_as_a_person_says_them() -> None:
    assert [duration(s) for s in (45, 60, 1800, 3600, 5400, 86400, 7 * 86400, 90.5)] == [
        "45 s",
        "1 min",
        "30 min",
        "1 h",
        "1 h 30 min",
        "1 day",
        "7 days",
        "90.5 s",
    ]
