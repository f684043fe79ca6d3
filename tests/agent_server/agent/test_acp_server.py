"""An ACP conversation through the real server: HTTP to create and steer it, the websocket to
watch it (deltas, tool calls, the final state), and deletion ending the agent's processes."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.agent_server.agent.test_acp import AGENT, SECRET, _alive
from tests.support.server import KEY, ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("acp") / "state").start()
    yield proc
    proc.stop()


@pytest.fixture
async def http(server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=server.url, headers={"X-Session-API-Key": KEY}, timeout=30
    ) as client:
        yield client


async def frames_until(ws: Any, status: str, timeout: float = 60) -> list[dict[str, Any]]:
    """Frames until a full_state with this execution_status."""
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while True:
            frame = json.loads(await ws.recv())
            out.append(frame)
            if (
                frame["kind"] == "ConversationStateUpdateEvent"
                and frame["key"] == "full_state"
                and frame["value"]["execution_status"] == status
            ):
                return out


async def test_a_conversation_over_http_and_the_websocket(
    server: ServerProcess, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    ws_dir = tmp_path / "ws"
    ws_dir.mkdir()
    (ws_dir / "in.txt").write_text("input text")
    pidfile = tmp_path / "pids"
    r = await http.post(
        "/api/conversations",
        json={
            "agent": {"kind": "ACPAgent", "acp_command": AGENT},
            "workspace": {"working_dir": str(ws_dir)},
            "secrets": {"ACP_TEST_SECRET": SECRET},
            "confirmation_policy": {"kind": "AlwaysConfirm"},
        },
    )
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    url = f"ws://127.0.0.1:{server.port}/sockets/events/{cid}"
    async with connect(
        url, additional_headers={"X-Session-API-Key": KEY}, max_size=None, proxy=None
    ) as ws:
        r = await http.post(
            f"/api/conversations/{cid}/events",
            json={
                "role": "user",
                "run": True,
                "content": [
                    {
                        "type": "text",
                        "text": "say Let me look.\nread in.txt\nenv ACP_TEST_SECRET\n"
                        "write out.txt done\n"
                        f"say All done.\nspawn {pidfile}",
                    }
                ],
            },
        )
        assert r.status_code == 200, r.text
        waiting = await frames_until(ws, "waiting_for_confirmation")
        r = await http.post(
            f"/api/conversations/{cid}/events/respond_to_confirmation", json={"accept": True}
        )
        assert r.status_code == 200, r.text
        finished = await frames_until(ws, "finished")
    frames = waiting + finished
    assert SECRET not in json.dumps(frames)
    deltas = "".join(f["content"] or "" for f in frames if f["kind"] == "StreamingDeltaEvent")
    assert deltas == "Let me look.All done."
    messages = [
        f["llm_message"]["content"][0]["text"]
        for f in frames
        if f["kind"] == "MessageEvent" and f["source"] == "agent"
    ]
    assert messages == ["Let me look.", "All done."]
    calls = [(f["tool_call_id"], f["status"]) for f in frames if f["kind"] == "ACPToolCallEvent"]
    assert ("call-1", "completed") in calls and ("call-3", "completed") in calls
    env_call = [
        f for f in frames if f["kind"] == "ACPToolCallEvent" and f["tool_call_id"] == "call-2"
    ][-1]
    assert env_call["raw_output"] == {"stdout": "<secret-hidden>"}
    assert (ws_dir / "out.txt").read_text() == "done"

    # The same events are stored; deleting the conversation ends the agent and its child.
    r = await http.get(f"/api/conversations/{cid}/events/search", params={"limit": 100})
    assert [e["kind"] for e in r.json()["items"]].count("ACPToolCallEvent") == len(calls)
    pids = [int(p) for p in pidfile.read_text().split()]
    assert all(_alive(p) for p in pids)
    r = await http.delete(f"/api/conversations/{cid}")
    assert r.status_code == 200
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids):
        assert time.monotonic() < deadline, "the agent's processes outlived the conversation"
        await asyncio.sleep(0.05)


def _said(http_items: list[dict[str, Any]]) -> list[str]:
    return [
        e["llm_message"]["content"][0]["text"]
        for e in http_items
        if e["kind"] == "MessageEvent" and e["source"] == "agent"
    ]


async def _turn(http: httpx.AsyncClient, cid: str, text: str) -> list[dict[str, Any]]:
    """Send `text`, wait until the run has finished with an answer: the events."""
    before = len(
        _said(
            (
                await http.get(f"/api/conversations/{cid}/events/search", params={"limit": 100})
            ).json()["items"]
        )
    )
    r = await http.post(
        f"/api/conversations/{cid}/events",
        json={"role": "user", "run": True, "content": [{"type": "text", "text": text}]},
    )
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 60
    while True:
        events = (
            await http.get(f"/api/conversations/{cid}/events/search", params={"limit": 100})
        ).json()["items"]
        status = (await http.get(f"/api/conversations/{cid}")).json()["execution_status"]
        if len(_said(events)) > before and status == "finished":
            return list(events)
        assert time.monotonic() < deadline, f"no answer to {text!r}: {status}"
        await asyncio.sleep(0.05)


async def test_a_side_questions_model_use_is_counted(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """What an ACP agent reports of a side question's model use counts in the conversation's
    metrics, as our own agent's side questions do, and adds no event. A fork's cumulative
    cost goes on from the conversation's session's, a new session's from 0: $0.25 each."""
    for name, args, spent in (
        ("plain", [], 0.25),
        ("forks", ["--sessions", str(tmp_path / "s.json"), "--fork"], 0.75),
    ):
        r = await http.post(
            "/api/conversations",
            json={
                "agent": {"kind": "ACPAgent", "acp_command": AGENT, "acp_args": args},
                "workspace": {"working_dir": str(tmp_path / name)},
            },
        )
        assert r.status_code == 201, r.text
        cid = r.json()["id"]
        await _turn(http, cid, "say hello\nusage 10 5 0.5")
        before = (
            await http.get(f"/api/conversations/{cid}/events/search", params={"limit": 100})
        ).json()["items"]
        r = await http.post(
            f"/api/conversations/{cid}/ask_agent", json={"question": f"usage 20 4 {spent}"}
        )
        assert r.status_code == 200, r.text
        metrics = (await http.get(f"/api/conversations/{cid}")).json()["metrics"]
        assert metrics["accumulated_cost"] == pytest.approx(0.75), name
        tokens = metrics["accumulated_token_usage"]
        assert (tokens["prompt_tokens"], tokens["completion_tokens"]) == (30, 9), name
        assert (
            await http.get(f"/api/conversations/{cid}/events/search", params={"limit": 100})
        ).json()["items"] == before


async def test_ask_agent_answers_in_a_side_session(http: httpx.AsyncClient, tmp_path: Path) -> None:
    """A side question to an ACP agent: with session/fork the agent's copy of the session
    answers (it remembers the conversation), without it a new session gets the latest
    messages; either way the conversation (events, status, the agent's own session) is as it
    was, and the side session may not write."""
    convs = {}
    for name, args in (
        ("forks", ["--sessions", str(tmp_path / "s.json"), "--fork"]),
        ("plain", []),
    ):
        r = await http.post(
            "/api/conversations",
            json={
                "agent": {"kind": "ACPAgent", "acp_command": AGENT, "acp_args": args},
                "workspace": {"working_dir": str(tmp_path / name)},
                "confirmation_policy": {"kind": "NeverConfirm"},
            },
        )
        assert r.status_code == 201, r.text
        convs[name] = r.json()["id"]
        await _turn(http, convs[name], "say the password is swordfish")

    forks, plain = convs["forks"], convs["plain"]
    questions = {
        forks: ("recall", "I remember: say the password is swordfish"),
        plain: ("quote swordfish", "swordfish is in the prompt"),
    }
    for cid, (question, wanted) in questions.items():
        before = (
            await http.get(f"/api/conversations/{cid}/events/search", params={"limit": 100})
        ).json()["items"]
        r = await http.post(f"/api/conversations/{cid}/ask_agent", json={"question": question})
        assert r.status_code == 200, r.text
        assert r.json()["response"] == wanted
        r = await http.post(
            f"/api/conversations/{cid}/ask_agent",
            json={"question": "write side.txt changed\nput put.txt changed"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["response"].startswith("put refused"), r.text
        ws = tmp_path / ("forks" if cid == forks else "plain")
        assert not (ws / "side.txt").exists() and not (ws / "put.txt").exists()
        after = (
            await http.get(f"/api/conversations/{cid}/events/search", params={"limit": 100})
        ).json()["items"]
        assert after == before
        assert (await http.get(f"/api/conversations/{cid}")).json()[
            "execution_status"
        ] == "finished"

    # The agent's own session never saw the side questions.
    events = await _turn(http, forks, "recall")
    assert _said(events)[-1] == "I remember: say the password is swordfish"
