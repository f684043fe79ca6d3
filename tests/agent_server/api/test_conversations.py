"""agent_server.api.conversations in-process: build_app(config, ScriptedModel) behind the
ASGI transport, with its lifespan running (tests/support/inprocess.py)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from agent_server.agent.model import Scripted, ScriptedModel
from tests.support.inprocess import KEY, InProcess, create_body, run_ends, serve

THINK = ("think", '{"thought": "working on it"}')


async def create(srv: InProcess, body: dict[str, Any]) -> dict[str, Any]:
    r = await srv.client.post("/api/conversations", json=body)
    assert r.status_code == 201, r.text
    return r.json()


async def search(srv: InProcess, cid: str, **params: Any) -> list[dict[str, Any]]:
    r = await srv.client.get(
        f"/api/conversations/{cid}/events/search", params={"limit": 100, **params}
    )
    assert r.status_code == 200, r.text
    return r.json()["items"]


async def test_create_run_and_search_the_events(
    srv: InProcess, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script += [Scripted(calls=[THINK]), Scripted(calls=[("finish", '{"message": "ok"}')])]
    conv = await create(srv, create_body(tmp_path / "ws", message="do it"))
    assert conv["execution_status"] == "idle"
    r = await srv.client.post(f"/api/conversations/{conv['id']}/run")
    assert (r.status_code, r.json()) == (200, {"success": True})
    await run_ends(srv.conversation(conv["id"]))
    r = await srv.client.get(f"/api/conversations/{conv['id']}")
    assert r.json()["execution_status"] == "finished"
    actions = await search(srv, conv["id"], kind__eq="ActionEvent")
    assert [a["tool_name"] for a in actions] == ["think", "finish"]
    observations = await search(srv, conv["id"], kind__eq="ObservationEvent")
    assert [o["action_id"] for o in observations] == [a["id"] for a in actions]
    r = await srv.client.get(f"/api/conversations/{conv['id']}/events/count")
    assert r.json() == len(await search(srv, conv["id"]))
    # The model was asked with the user's message.
    assert model.requests[0][-1] == {"role": "user", "content": [{"type": "text", "text": "do it"}]}


async def test_a_status_is_shown_once_its_event_is_stored(
    srv: InProcess, model: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that reads "finished" and then exports or searches the log finds the event
    that says so, however slow the disk (CI once read the status first)."""
    model.script += [Scripted(calls=[("finish", '{"message": "ok"}')])]
    conv = await create(srv, create_body(tmp_path / "ws", message="do it"))
    cid = conv["id"]
    log = await srv.conversation(cid).log()
    reached, release = threading.Event(), threading.Event()
    write = log._write

    def slow_disk(data: bytes) -> float:
        if b'"value":"finished"' in data:
            reached.set()
            release.wait(30)
        return write(data)

    monkeypatch.setattr(log, "_write", slow_disk)
    r = await srv.client.post(f"/api/conversations/{cid}/run")
    assert r.status_code == 200
    try:
        assert await asyncio.to_thread(reached.wait, 30)
        r = await srv.client.get(f"/api/conversations/{cid}")
        assert r.json()["execution_status"] == "running"
        r = await srv.client.get("/api/conversations/search", params={"status": "finished"})
        assert r.json()["items"] == []
    finally:
        release.set()
    await run_ends(srv.conversation(cid))
    r = await srv.client.get(f"/api/conversations/{cid}")
    assert r.json()["execution_status"] == "finished"
    moves = await search(srv, cid, kind__eq="ConversationStateUpdateEvent")
    assert [m["value"] for m in moves if m["key"] == "execution_status"] == ["running", "finished"]


async def test_the_session_key_is_required(srv: InProcess) -> None:
    r = await srv.client.get("/api/conversations/search", headers={"X-Session-API-Key": "no"})
    assert r.status_code == 401
    r = await srv.client.get("/api/conversations/search")
    assert (r.status_code, r.json()["items"]) == (200, [])
    assert srv.client.headers["X-Session-API-Key"] == KEY


@pytest.mark.parametrize(
    ("change", "loc", "type_"),
    [
        (
            {"agent": {"llm": {"model": "m"}, "tools": [{"name": "teleporter"}]}},
            ["body", "agent", "tools", 0, "name"],
            "unknown_tool",
        ),
        ({"agent": {"llm": {"model": ""}}}, ["body", "agent", "llm", "model"], "string_too_short"),
        ({"max_iterations": 0}, ["body", "max_iterations"], "greater_than_equal"),
        ({"secrets": {"K": "abc"}}, ["body", "secrets", "K"], "string_too_short"),
        ({"agent": None}, ["body", "agent"], "missing"),
        (
            {"confirmation_policy": {"kind": "Sometimes"}},
            ["body", "confirmation_policy"],
            "union_tag_invalid",
        ),
    ],
    ids=["unknown-tool", "empty-model", "max-iterations", "short-secret", "no-agent", "bad-policy"],
)
async def test_a_bad_create_body_is_located(
    srv: InProcess, tmp_path: Path, change: dict[str, Any], loc: list[Any], type_: str
) -> None:
    body = {**create_body(tmp_path / "ws"), **change}
    if body["agent"] is None:
        del body["agent"]
    r = await srv.client.post("/api/conversations", json=body)
    assert r.status_code == 422, r.text
    [error] = r.json()["detail"]
    assert (error["loc"], error["type"]) == (loc, type_)
    assert len(srv.services.conversations) == 0  # nothing half made


async def test_unknown_conversations_are_404(srv: InProcess) -> None:
    missing = uuid.uuid4()
    for method, path in [
        ("GET", ""),
        ("DELETE", ""),
        ("POST", "/run"),
        ("POST", "/pause"),
        ("GET", "/events/search"),
        ("GET", "/events/01JAAAAAAAAAAAAAAAAAAAAAAA"),
    ]:
        r = await srv.client.request(method, f"/api/conversations/{missing}{path}")
        assert r.status_code == 404, (method, path, r.text)
        assert str(missing) in r.json()["detail"], (method, path)


async def test_a_bad_id_is_422_at_its_path(srv: InProcess) -> None:
    r = await srv.client.get("/api/conversations/not-a-uuid")
    assert r.status_code == 422
    assert [e["loc"] for e in r.json()["detail"]] == [["path", "conversation_id"]]


async def test_an_unknown_event_is_404(srv: InProcess, tmp_path: Path) -> None:
    conv = await create(srv, create_body(tmp_path / "ws"))
    r = await srv.client.get(f"/api/conversations/{conv['id']}/events/01JAAAAAAAAAAAAAAAAAAAAAAA")
    assert r.status_code == 404


async def test_confirmation_answers(srv: InProcess, model: ScriptedModel, tmp_path: Path) -> None:
    conv = await create(
        srv,
        create_body(
            tmp_path / "ws", tools=["terminal"], confirmation_policy={"kind": "AlwaysConfirm"}
        ),
    )
    url = f"/api/conversations/{conv['id']}/events/respond_to_confirmation"
    r = await srv.client.post(url, json={"accept": True})
    assert r.status_code == 409
    assert r.json() == {
        "detail": "No action is waiting for confirmation (execution_status is idle)"
    }
    model.script.append(Scripted(calls=[("terminal", '{"command": "echo approved"}')]))
    r = await srv.client.post(
        f"/api/conversations/{conv['id']}/events",
        json={"role": "user", "content": [{"type": "text", "text": "go"}], "run": True},
    )
    assert r.status_code == 200
    await run_ends(srv.conversation(conv["id"]))
    r = await srv.client.get(f"/api/conversations/{conv['id']}")
    assert r.json()["execution_status"] == "waiting_for_confirmation"
    r = await srv.client.post(url, json={"accept": "maybe"})
    assert r.status_code == 422
    assert [e["loc"] for e in r.json()["detail"]] == [["body", "accept"]]
    r = await srv.client.post(url, json={"accept": True})
    assert r.status_code == 200
    await run_ends(srv.conversation(conv["id"]))
    [observation] = await search(srv, conv["id"], kind__eq="ObservationEvent")
    assert "approved" in observation["observation"]["content"][0]["text"]


async def test_delete_then_404(srv: InProcess, tmp_path: Path) -> None:
    conv = await create(srv, create_body(tmp_path / "ws"))
    r = await srv.client.delete(f"/api/conversations/{conv['id']}")
    assert (r.status_code, r.json()) == (200, {"success": True})
    r = await srv.client.get(f"/api/conversations/{conv['id']}")
    assert r.status_code == 404


async def test_a_conversation_survives_a_restart(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        conv = await create(srv, create_body(tmp_path / "ws", title="kept"))
    async with serve(tmp_path) as srv:
        r = await srv.client.get(f"/api/conversations/{conv['id']}")
        assert (r.status_code, r.json()["title"]) == (200, "kept")
