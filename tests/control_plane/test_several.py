"""Two control-plane processes on one PostgreSQL database serving the same user: 20 starts at
once spread over both, one of them SIGKILLed in the middle. Every start ends READY or ERROR
exactly once (none lost, none placed twice), no sandbox is over its grouping capacity, and the
survivor takes over the dead one's leases; a webhook batch is taken by whichever process gets
it."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from control_plane.store import Database
from control_plane.store.tables import app_conversations, leases, start_tasks
from tests.control_plane.planes import PlaneProcess, kill_sandboxes, several
from tests.control_plane.postgres import PostgresServer
from tests.control_plane.support import configure_llm, wait_for
from tests.support.llm import ScriptedLLM, call

pytestmark = pytest.mark.e2e

CAP = 3
STARTS = 20


@pytest.fixture
def planes(tmp_path: Path, postgres: PostgresServer) -> Iterator[list[PlaneProcess]]:
    found = several(tmp_path, postgres.new_database(), 2, lease_seconds="2",
                    lifecycle_interval="0.5", max_conversations_per_sandbox=str(CAP))
    yield found
    for plane in found:
        plane.stop()
    for plane in found:
        kill_sandboxes(plane.state_dir)


def tasks_of(client: httpx.Client, ids: list[str]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = client.get("/api/v1/app-conversations/start-tasks",
                                             params={"ids": ids}).json()
    return found


def query(url: str, statement: Any) -> list[Any]:
    async def run() -> list[Any]:
        db = Database(url)
        try:
            async with db.connect() as conn:
                return list(await conn.execute(statement))
        finally:
            await db.close()
    return asyncio.run(run())


def test_two_planes_one_database_and_a_sigkill_mid_burst(planes: list[PlaneProcess],
                                                         llm: ScriptedLLM, key: str) -> None:
    a, b = planes
    url = a.env["CONTROL_PLANE_DATABASE_URL"]
    api_key = a.new_key("alice")
    headers = {"Authorization": f"Bearer {api_key}"}
    ca = httpx.Client(base_url=a.url, headers=headers, timeout=30)
    cb = httpx.Client(base_url=b.url, headers=headers, timeout=30)
    configure_llm(cb, llm.base_url(key))
    assert ca.patch("/api/v1/settings", json={"grouping_strategy": "ADD_TO_ANY"}).status_code == 200

    # A run placed by B: its sandbox's webhook batches are taken by A.
    llm.script(key, call("finish", message="done"))
    first = cb.post("/api/v1/app-conversations", json={"initial_message": {
        "content": [{"type": "text", "text": "hi"}], "run": True}}).json()["id"]
    wait_for(lambda: tasks_of(ca, [first])[0]["status"] == "READY", 60, what="the first start")
    cid = tasks_of(ca, [first])[0]["app_conversation_id"]
    wait_for(lambda: ca.get(f"/api/v1/conversation/{cid}/events/count",
                            params={"kind__eq": "ActionEvent"}).json()["count"] == 1, 60,
             what="the webhook")

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
    b_leases = [r.key for r in query(url, select(leases.c.key).where(
        leases.c.kind == "start-task", leases.c.holder.like(f"%:{b.proc.pid}:%")))]
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
    assert query(url, select(func.count()).select_from(leases)
                 .where(leases.c.kind == "start-task"))[0][0] == 0
    ca.close()
    cb.close()
