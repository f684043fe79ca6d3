"""Grouping through the API with real sandboxes: explicit sandbox_id, strategies by age, activity
and load, concurrent starts under the cap, and a message resuming a PAUSED sandbox; and each
strategy's choice among given candidates (in-process)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.grouping import Candidate, choose
from control_plane.models import GroupingStrategy
from tests.control_plane.support import (
    ControlPlane,
    configure_llm,
    conversation,
    make_config,
    start,
    whole_run,
)
from tests.support.llm import ScriptedLLM, call
from tests.support.wait import wait_for


@pytest.fixture
def plane(tmp_path: Path, database_url: str) -> Iterator[ControlPlane]:
    """On SQLite and on PostgreSQL."""
    server = ControlPlane(
        make_config(tmp_path / "cp", database_url, max_conversations_per_sandbox=10)
    ).start()
    yield server
    server.stop()


def strategy(client: httpx.Client, name: str) -> None:
    assert client.patch("/api/v1/settings", json={"grouping_strategy": name}).status_code == 200


@pytest.mark.e2e
def test_strategies_and_explicit_placement(plane: ControlPlane, llm: ScriptedLLM, key: str) -> None:
    client = plane.client(plane.new_user("alice"))
    configure_llm(client, llm.base_url(key))
    a = start(client)
    b = start(client)
    s1, s2 = a["sandbox_id"], b["sandbox_id"]  # s1 older than s2
    assert s1 != s2

    # Explicit sandbox_id overrides grouping (NO_GROUPING here) and gets its own working dir.
    c = start(client, sandbox_id=s1)
    assert c["status"] == "READY" and c["sandbox_id"] == s1
    assert conversation(client, c["app_conversation_id"])["sandbox_id"] == s1
    # s1: 2 conversations, s2: 1.
    strategy(client, "FEWEST_CONVERSATIONS")
    assert start(client)["sandbox_id"] == s2  # now 2 and 2
    strategy(client, "GROUP_BY_NEWEST")
    assert start(client)["sandbox_id"] == s2  # 2 and 3
    strategy(client, "ADD_TO_ANY")
    assert start(client)["sandbox_id"] == s1  # 3 and 3

    # Least recently used is about activity, not age: a message makes s1 the most recent.
    llm.script(key, call("finish", message="ok"))
    r = client.post(
        f"/api/v1/app-conversations/{a['app_conversation_id']}/send-message",
        json={"content": [{"type": "text", "text": "hi"}], "run": True},
    )
    assert r.status_code == 200
    # Its run's events reach the webhook after any of s2's: s1 is the most recently active
    # once the last of them is stored (the record says "finished" before: it asks the agent).
    wait_for(
        lambda: whole_run(client, a["app_conversation_id"]),
        30,
        what="the run's events to be stored",
    )
    strategy(client, "LEAST_RECENTLY_USED")
    assert start(client)["sandbox_id"] == s2
    strategy(client, "NO_GROUPING")
    assert start(client)["sandbox_id"] not in (s1, s2)

    # A paused sandbox is not available for grouping, but a message to it resumes it.
    assert client.post(f"/api/v1/sandboxes/{s1}/pause").json()["status"] == "PAUSED"
    strategy(client, "ADD_TO_ANY")
    assert start(client)["sandbox_id"] == s2
    llm.script(key, call("finish", message="resumed"))
    r = client.post(
        f"/api/v1/app-conversations/{a['app_conversation_id']}/send-message",
        json={"content": [{"type": "text", "text": "again"}], "run": True},
    )
    assert r.status_code == 200, r.text
    assert client.get("/api/v1/sandboxes", params={"id": s1}).json()[0]["status"] == "RUNNING"

    # An explicit sandbox_id that is PAUSED is resumed for the new conversation.
    assert client.post(f"/api/v1/sandboxes/{s2}/pause").json()["status"] == "PAUSED"
    explicit = start(client, sandbox_id=s2)
    assert explicit["status"] == "READY" and explicit["sandbox_id"] == s2
    assert client.get("/api/v1/sandboxes", params={"id": s2}).json()[0]["status"] == "RUNNING"

    # Grouped conversations each have their own working directory in the sandbox's workspace.
    workspaces = plane.config.state_dir / "sandboxes" / s1 / "workspace"
    assert (workspaces / a["app_conversation_id"]).is_dir()
    assert (workspaces / c["app_conversation_id"]).is_dir()

    # Deleting one conversation of a paused sandbox that keeps others removes the sandbox's
    # copy too, and leaves the sandbox paused.
    assert client.post(f"/api/v1/sandboxes/{s1}/pause").json()["status"] == "PAUSED"
    gone = c["app_conversation_id"]
    assert client.delete(f"/api/v1/app-conversations/{gone}").status_code == 200
    record = client.get("/api/v1/sandboxes", params={"id": s1}).json()[0]
    assert record["status"] == "PAUSED"
    assert client.post(f"/api/v1/sandboxes/{s1}/resume").json()["status"] == "RUNNING"
    url = next(
        u["url"]
        for u in client.get("/api/v1/sandboxes", params={"id": s1}).json()[0]["exposed_urls"]
        if u["name"] == "AGENT_SERVER"
    )
    key_of_s1 = client.get("/api/v1/sandboxes", params={"id": s1}).json()[0]["session_api_key"]
    copy = httpx.get(f"{url}/api/conversations/{gone}", headers={"X-Session-API-Key": key_of_s1})
    assert copy.status_code == 404


@pytest.mark.e2e
def test_concurrent_starts_never_exceed_the_cap(
    plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    """Two RUNNING sandboxes with 9 free places each; 20 starts at once: 9 + 9 + 2 elsewhere."""
    client = plane.client(plane.new_user("bob"))
    configure_llm(client, llm.base_url(key))
    first, second = start(client), start(client)
    s1, s2 = first["sandbox_id"], second["sandbox_id"]
    strategy(client, "ADD_TO_ANY")

    def one(_: int) -> dict[str, Any]:
        with plane.client(client.headers["authorization"].split()[1]) as own:
            return start(own)

    with ThreadPoolExecutor(20) as pool:
        tasks = list(pool.map(one, range(20)))
    assert all(t["status"] == "READY" for t in tasks), [
        t["detail"] for t in tasks if t["status"] != "READY"
    ]
    placed = Counter(t["sandbox_id"] for t in tasks)
    assert placed[s1] == 9 and placed[s2] == 9
    others = [s for s in placed if s not in (s1, s2)]
    assert sum(placed[s] for s in others) == 2
    assert client.get("/api/v1/app-conversations/count", params={"sandbox_id": s1}).json() == 10
    assert client.get("/api/v1/app-conversations/count", params={"sandbox_id": s2}).json() == 10


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_choices_of_each_strategy() -> None:
    def c(name: str, age: int, idle: int, n: int) -> Candidate:
        return Candidate(name, T0 - timedelta(minutes=age), T0 - timedelta(minutes=idle), n)

    available = [c("old", 60, 50, 5), c("mid", 30, 1, 1), c("new", 10, 20, 1)]
    assert choose(GroupingStrategy.NO_GROUPING, available) is None
    assert choose(GroupingStrategy.GROUP_BY_NEWEST, available) == "new"
    assert choose(GroupingStrategy.LEAST_RECENTLY_USED, available) == "old"
    assert choose(GroupingStrategy.FEWEST_CONVERSATIONS, available) == "mid"  # tie: the older
    assert choose(GroupingStrategy.ADD_TO_ANY, available) == "old"
    for strategy in GroupingStrategy:
        assert choose(strategy, []) is None
