"""Two control-plane processes on one PostgreSQL database serving the same user: 20 starts at
once spread over both, one of them SIGKILLed in the middle. Every start ends READY or ERROR
exactly once (none lost, none placed twice), no sandbox is over its grouping capacity, and the
survivor takes over the dead one's leases; a webhook batch is taken by whichever process gets
it. A pause cut short by a SIGKILL is finished by the other process."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from control_plane.store.tables import app_conversations, leases, sandboxes, start_tasks
from core import processes
from tests.control_plane.planes import PlaneProcess, kill_sandboxes, query, sandbox_pids, several
from tests.control_plane.postgres import PostgresServer
from tests.control_plane.support import configure_llm
from tests.support.llm import Reply, ScriptedLLM, call
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

CAP = 3
STARTS = 20


@pytest.fixture
def planes(tmp_path: Path, postgres: PostgresServer) -> Iterator[list[PlaneProcess]]:
    found = several(
        tmp_path,
        postgres.new_database(),
        2,
        lease_seconds="2",
        lifecycle_interval="0.5",
        max_conversations_per_sandbox=str(CAP),
    )
    yield found
    for plane in found:
        plane.stop()
    for plane in found:
        kill_sandboxes(plane.state_dir)


@pytest.fixture
def clients() -> Iterator[Callable[..., httpx.Client]]:
    """httpx clients closed at teardown, passed or failed (a client a failed assertion left
    open would be reported as a leaked socket in whichever test runs next)."""
    made: list[httpx.Client] = []

    def make(**options: Any) -> httpx.Client:
        made.append(httpx.Client(**options))
        return made[-1]

    yield make
    for client in made:
        client.close()


def tasks_of(client: httpx.Client, ids: list[str]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = client.get(
        "/api/v1/app-conversations/start-tasks", params={"ids": ids}
    ).json()
    return found


def test_two_planes_one_database_and_a_sigkill_mid_burst(
    planes: list[PlaneProcess], llm: ScriptedLLM, key: str, clients: Callable[..., httpx.Client]
) -> None:
    a, b = planes
    url = a.env["CONTROL_PLANE_DATABASE_URL"]
    api_key = a.new_key("alice")
    headers = {"Authorization": f"Bearer {api_key}"}
    ca = clients(base_url=a.url, headers=headers, timeout=30)
    cb = clients(base_url=b.url, headers=headers, timeout=30)
    configure_llm(cb, llm.base_url(key))
    assert ca.patch("/api/v1/settings", json={"grouping_strategy": "ADD_TO_ANY"}).status_code == 200

    # A run placed by B: its sandbox's webhook batches are taken by A.
    llm.script(key, call("finish", message="done"))
    first = cb.post(
        "/api/v1/app-conversations",
        json={"initial_message": {"content": [{"type": "text", "text": "hi"}], "run": True}},
    ).json()["id"]
    wait_for(lambda: tasks_of(ca, [first])[0]["status"] == "READY", 60, what="the first start")
    cid = tasks_of(ca, [first])[0]["app_conversation_id"]
    wait_for(
        lambda: (
            ca.get(
                f"/api/v1/conversation/{cid}/events/count", params={"kind__eq": "ActionEvent"}
            ).json()
            == 1
        ),
        60,
        what="the webhook",
    )

    # 20 at once, alternately to A and B; B is SIGKILLed while they start.
    def post(i: int) -> tuple[str, str]:
        client = ca if i % 2 == 0 else cb
        r = client.post("/api/v1/app-conversations", json={})
        assert r.status_code == 201, r.text
        return ("a" if i % 2 == 0 else "b"), r.json()["id"]

    with ThreadPoolExecutor(STARTS) as pool:
        posted = list(pool.map(post, range(STARTS)))
    b.kill()
    assert b.proc is not None
    b_leases = [
        r.key
        for r in query(
            url,
            select(leases.c.key).where(
                leases.c.kind == "start-task", leases.c.holder.like(f"%:{b.proc.pid}:%")
            ),
        )
    ]
    ids = [task_id for _, task_id in posted]
    of_b = [task_id for who, task_id in posted if who == "b"]
    unfinished = [t["id"] for t in tasks_of(ca, of_b) if t["status"] not in ("READY", "ERROR")]
    assert unfinished, "B was to be killed in the middle of its starts"
    assert set(unfinished) <= set(b_leases)  # what B was working on, it held

    def finished() -> list[dict[str, Any]] | None:
        found = tasks_of(ca, ids)
        return found if all(t["status"] in ("READY", "ERROR") for t in found) else None

    done = wait_for(finished, 120, interval=0.2, what="every start to end")

    # None lost: every start READY (a takeover finds the sandbox B was booting, or boots it).
    assert Counter(t["status"] for t in done) == {"READY": STARTS}, [t["detail"] for t in done]
    # None doubled: one conversation per start, each placed once.
    conversations = [t["app_conversation_id"] for t in done]
    assert len(set(conversations)) == STARTS
    rows = query(url, select(app_conversations.c.start_task_id, app_conversations.c.started))
    assert sorted(r.start_task_id for r in rows) == sorted([*ids, first])
    assert all(r.started for r in rows)
    assert query(url, select(func.count()).select_from(start_tasks))[0][0] == STARTS + 1
    # No sandbox over its capacity, none left starting.
    items = ca.get("/api/v1/sandboxes/search").json()["items"]
    assert all(s["conversation_count"] <= CAP for s in items)
    assert {s["status"] for s in items} == {"RUNNING"}
    assert sum(s["conversation_count"] for s in items) == STARTS + 1
    # The survivor took B's leases over and released them when done.
    assert (
        query(url, select(func.count()).select_from(leases).where(leases.c.kind == "start-task"))[
            0
        ][0]
        == 0
    )


@pytest.fixture
def strict_planes(tmp_path: Path, postgres: PostgresServer) -> Iterator[list[PlaneProcess]]:
    """Two planes that hold a frozen RUNNING sandbox for hung after one second."""
    found = several(
        tmp_path,
        postgres.new_database(),
        2,
        lease_seconds="2",
        lifecycle_interval="0.5",
        health_grace="1",
        pause_grace="30",
    )
    yield found
    for plane in found:
        plane.stop()
    for plane in found:
        kill_sandboxes(plane.state_dir)


def test_a_pause_cut_short_by_a_sigkill_is_finished_by_the_other(
    strict_planes: list[PlaneProcess],
    llm: ScriptedLLM,
    key: str,
    clients: Callable[..., httpx.Client],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """B pauses a sandbox with a run in flight and is SIGKILLed once the sandbox is frozen but
    before PAUSED is stored. A finds the pause recorded as under way and finishes it (PAUSED,
    with the user's reason), instead of taking the frozen sandbox for hung (ERROR after the
    grace); resuming through A continues the run to its end."""
    a, b = strict_planes
    url = a.env["CONTROL_PLANE_DATABASE_URL"]
    headers = {"Authorization": f"Bearer {a.new_key('bob')}"}
    ca = clients(base_url=a.url, headers=headers, timeout=30)
    cb = clients(base_url=b.url, headers=headers, timeout=60)
    configure_llm(ca, llm.base_url(key), tools=["terminal"])
    slow = call("terminal", command="echo two")
    slow.delay = 4.0
    steps = [call("terminal", command="echo one"), slow, call("finish", message="done")]

    # The model's reply depends on the step, not on the order of requests: the slow one may
    # be asked of B's LLM gateway (the sandboxes' side is shared), cut short with B, and asked
    # again of A.
    def by_step(asked: str, body: dict[str, Any]) -> Reply | None:
        done = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
        return steps[min(done, 2)] if asked == key else None

    monkeypatch.setattr(llm, "interceptor", by_step)
    task_id = cb.post(
        "/api/v1/app-conversations",
        json={"initial_message": {"content": [{"type": "text", "text": "go"}], "run": True}},
    ).json()["id"]
    task = wait_for(
        lambda: (t := tasks_of(ca, [task_id])[0])["status"] == "READY" and t, 60, what="the start"
    )
    cid, sid = task["app_conversation_id"], task["sandbox_id"]

    def actions() -> int:
        n: int = ca.get(
            f"/api/v1/conversation/{cid}/events/count", params={"kind__eq": "ActionEvent"}
        ).json()
        return n

    wait_for(lambda: actions() >= 1, 60, what="the first step")

    # B pauses it while the model answers its slow reply: the run is asked to pause first.
    def pause() -> None:
        with contextlib.suppress(httpx.HTTPError):
            cb.post(f"/api/v1/sandboxes/{sid}/pause")

    pauser = threading.Thread(target=pause)
    pauser.start()
    wait_for(
        lambda: query(
            url, select(app_conversations.c.resume_run).where(app_conversations.c.id == cid)
        )[0][0],
        30,
        what="B to pause the run",
    )
    [row] = query(
        url, select(sandboxes.c.status, sandboxes.c.pausing_reason).where(sandboxes.c.id == sid)
    )
    assert (row.status, row.pausing_reason) == ("RUNNING", "USER")
    # Frozen (as B's provider would), and B dies before it stores PAUSED.
    pid = {**sandbox_pids(a.state_dir), **sandbox_pids(b.state_dir)}[sid]
    processes.signal_group(pid, signal.SIGSTOP)
    b.kill()
    pauser.join(30)

    def status() -> dict[str, Any]:
        found: dict[str, Any] = ca.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
        return found

    record = wait_for(
        lambda: (s := status())["status"] != "RUNNING" and s, 30, what="A to look at the sandbox"
    )
    time.sleep(2.0)  # twice the health grace: a hung sandbox would be ERROR by now
    record = status()
    assert (record["status"], record["status_reason"]) == ("PAUSED", "USER"), record
    assert processes.state(pid) == "T"
    notices = [
        e["value"]
        for e in ca.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 1000}).json()[
            "items"
        ]
        if e["kind"] == "ConversationStateUpdateEvent" and e["key"] == "sandbox_status"
    ]
    assert [(n["status"], n["reason"]) for n in notices] == [("PAUSED", "USER")]

    # Resumed through A: the run B paused goes on to its end.
    r = ca.post(f"/api/v1/sandboxes/{sid}/resume")
    assert r.status_code == 200 and r.json()["status"] == "RUNNING", r.text
    wait_for(
        lambda: (
            ca.get("/api/v1/app-conversations", params={"ids": cid}).json()[0]["execution_status"]
            == "finished"
        ),
        60,
        what="the run to finish",
    )
    wait_for(lambda: actions() == 3, 60, what="every step")
