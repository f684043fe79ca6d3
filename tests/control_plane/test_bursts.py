"""Bursts on the default store (SQLite): many starts at once from one user all end READY, or
refused by a cap with a detail that says which; none ends on "database is locked", no detail
holds SQL or a traceback, no background job fails unseen, and no sandbox is left STARTING."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.control_plane.support import ControlPlane, configure_llm, make_config, start
from tests.support.llm import ScriptedLLM
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

#: What no log line of the control plane or detail a user reads may hold after a burst.
NEVER = ("database is locked", "never retrieved", "Traceback", "[SQL", "OperationalError")


def burst(plane: ControlPlane, key: str, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    """The starts posted all at once."""

    async def post() -> list[httpx.Response]:
        async with httpx.AsyncClient(
            base_url=plane.url, timeout=120, headers={"Authorization": f"Bearer {key}"}
        ) as client:
            return list(
                await asyncio.gather(
                    *(client.post("/api/v1/app-conversations", json=b) for b in bodies)
                )
            )

    return asyncio.run(post())


def finished(client: httpx.Client, ids: list[str]) -> list[dict[str, Any]]:
    """The tasks once every one has ended (READY or ERROR)."""

    def look() -> list[dict[str, Any]] | None:
        found: list[dict[str, Any]] = []
        for i in range(0, len(ids), 100):
            found += client.get(
                "/api/v1/app-conversations/start-tasks", params={"ids": ids[i : i + 100]}
            ).json()
        return found if all(t["status"] in ("READY", "ERROR") for t in found) else None

    result: list[dict[str, Any]] = wait_for(look, 300, interval=0.2, what="the burst's tasks")
    return result


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    server = ControlPlane(make_config(tmp_path / "cp", max_conversations_per_sandbox=101)).start()
    yield server
    server.stop()


def test_a_hundred_starts_at_once_all_end_ready(
    plane: ControlPlane, llm: ScriptedLLM, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    api_key = plane.new_user("busy")
    client = plane.client(api_key)
    configure_llm(client, llm.base_url(key), grouping_strategy="ADD_TO_ANY")
    first = start(client)
    assert first["status"] == "READY", first

    answers = burst(plane, api_key, [{"title": f"burst {i}"} for i in range(100)])
    assert [r.status_code for r in answers] == [201] * 100
    tasks = finished(client, [r.json()["id"] for r in answers])
    assert [(t["status"], t["detail"]) for t in tasks] == [("READY", None)] * 100
    assert {t["sandbox_id"] for t in tasks} == {first["sandbox_id"]}
    assert client.get("/api/v1/app-conversations/count").json() == 101
    sandboxes = client.get("/api/v1/sandboxes/search").json()["items"]
    assert [s["status"] for s in sandboxes] == ["RUNNING"]
    logged = caplog.text
    assert not [word for word in NEVER if word in logged], logged[-3000:]


def test_a_hundred_starts_past_the_sandbox_cap_are_refused_in_words(
    tmp_path: Path, llm: ScriptedLLM, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A sandbox each (the default grouping), four allowed: four starts end READY, the others
    ERROR with the cap's own words, and nothing is left STARTING."""
    plane = ControlPlane(make_config(tmp_path / "cp", max_sandboxes_per_user=4)).start()
    try:
        api_key = plane.new_user("many")
        client = plane.client(api_key)
        configure_llm(client, llm.base_url(key))
        answers = burst(plane, api_key, [{"title": f"burst {i}"} for i in range(100)])
        assert [r.status_code for r in answers] == [201] * 100
        tasks = finished(client, [r.json()["id"] for r in answers])
        outcomes = sorted((t["status"], t["detail"]) for t in tasks)
        assert outcomes[-4:] == [("READY", None)] * 4, outcomes
        assert {o[0] for o in outcomes[:-4]} == {"ERROR"}
        assert {o[1] for o in outcomes[:-4]} == {
            "at most 4 live sandboxes per user: delete or let some be cleaned up first"
        }
        sandboxes = client.get("/api/v1/sandboxes/search").json()["items"]
        assert sorted(s["status"] for s in sandboxes) == ["RUNNING"] * 4
        assert not [word for word in NEVER if word in caplog.text], caplog.text[-3000:]
    finally:
        plane.stop()


def test_bursts_over_the_host_and_sandbox_caps_never_pass_them(
    tmp_path: Path, llm: ScriptedLLM, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two users starting at once share the host's cap (3 live sandboxes): three starts end
    READY, the others ERROR saying so. Then starts naming one sandbox (capped at 4
    conversations) fill it to the cap and no further."""
    plane = ControlPlane(
        make_config(tmp_path / "cp", max_sandboxes=3, max_conversations_per_sandbox=4)
    ).start()
    try:
        keys = [plane.new_user("ann"), plane.new_user("ben")]
        clients = [plane.client(k) for k in keys]
        for client in clients:
            configure_llm(client, llm.base_url(key))

        async def both() -> list[list[httpx.Response]]:
            return list(
                await asyncio.gather(
                    *(
                        asyncio.to_thread(burst, plane, k, [{"title": f"{i}"} for i in range(8)])
                        for k in keys
                    )
                )
            )

        answers = asyncio.run(both())
        tasks = [
            t
            for client, sent in zip(clients, answers, strict=True)
            for t in finished(client, [r.json()["id"] for r in sent])
        ]
        ready = [t for t in tasks if t["status"] == "READY"]
        assert len(ready) == 3
        assert {t["detail"] for t in tasks if t not in ready} == {
            "this control plane runs its most live sandboxes (3, over all users): try again "
            "once some are deleted or cleaned up"
        }
        live = [
            s
            for c in clients
            for s in c.get("/api/v1/sandboxes/search").json()["items"]
            if s["status"] in ("STARTING", "RUNNING", "PAUSED")
        ]
        assert len(live) == 3

        owner = next(
            c
            for c, k in zip(clients, keys, strict=True)
            if any(
                s["id"] == ready[0]["sandbox_id"]
                for s in c.get("/api/v1/sandboxes/search").json()["items"]
            )
        )
        sid = ready[0]["sandbox_id"]
        sent = burst(plane, keys[clients.index(owner)], [{"sandbox_id": sid}] * 20)
        named = finished(owner, [r.json()["id"] for r in sent])
        assert sorted(t["status"] for t in named) == ["ERROR"] * 17 + ["READY"] * 3
        assert {t["detail"] for t in named if t["status"] == "ERROR"} == {
            f"sandbox {sid} holds 4 conversations, its most: start this one in another sandbox"
        }
        counted = owner.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
        assert counted["conversation_count"] == 4
        assert not [word for word in NEVER if word in caplog.text], caplog.text[-3000:]
    finally:
        plane.stop()


def test_no_sandbox_starts_on_a_host_short_of_memory(
    tmp_path: Path, llm: ScriptedLLM, key: str
) -> None:
    """A floor of free memory above what this host has: a sandbox is refused in words (429),
    a start ends ERROR saying why, and nothing is started."""
    plane = ControlPlane(make_config(tmp_path / "cp", sandbox_memory_floor="1PiB")).start()
    try:
        client = plane.client(plane.new_user("meg"))
        configure_llm(client, llm.base_url(key))
        r = client.post("/api/v1/sandboxes", json={})
        assert (
            r.status_code == 429
            and "MiB of memory available, under the 1073741824 MiB" in r.json()["detail"]
        ), r.text
        task = start(client)
        assert task["status"] == "ERROR" and "memory available" in task["detail"], task
        assert client.get("/api/v1/sandboxes/search").json()["items"] == []
    finally:
        plane.stop()
