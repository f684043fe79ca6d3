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

from tests.agent.test_acp import AGENT, SECRET, _alive
from tests.support.server import KEY, ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("acp") / "state").start()
    yield proc
    proc.stop()


@pytest.fixture
async def http(server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, headers={"X-Session-API-Key": KEY},
                                 timeout=30) as client:
        yield client


async def frames_until(ws: Any, status: str, timeout: float = 60) -> list[dict[str, Any]]:
    """Frames until a full_state with this execution_status."""
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while True:
            frame = json.loads(await ws.recv())
            out.append(frame)
            if (frame["kind"] == "ConversationStateUpdateEvent" and frame["key"] == "full_state"
                    and frame["value"]["execution_status"] == status):
                return out


async def test_a_conversation_over_http_and_the_websocket(server: ServerProcess,
                                                         http: httpx.AsyncClient,
                                                         tmp_path: Path) -> None:
    ws_dir = tmp_path / "ws"
    ws_dir.mkdir()
    (ws_dir / "in.txt").write_text("input text")
    pidfile = tmp_path / "pids"
    r = await http.post("/api/conversations", json={
        "agent": {"kind": "ACPAgent", "acp_command": AGENT},
        "workspace": {"working_dir": str(ws_dir)},
        "secrets": {"ACP_TEST_SECRET": SECRET},
        "confirmation_policy": {"kind": "AlwaysConfirm"}})
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    url = f"ws://127.0.0.1:{server.port}/sockets/events/{cid}"
    async with connect(url, additional_headers={"X-Session-API-Key": KEY}, max_size=None,
                       proxy=None) as ws:
        r = await http.post(f"/api/conversations/{cid}/events", json={
            "role": "user", "run": True, "content": [{"type": "text", "text":
                "say Let me look.\nread in.txt\nenv ACP_TEST_SECRET\nwrite out.txt done\n"
                f"say All done.\nspawn {pidfile}"}]})
        assert r.status_code == 200, r.text
        waiting = await frames_until(ws, "waiting_for_confirmation")
        r = await http.post(f"/api/conversations/{cid}/events/respond_to_confirmation",
                            json={"accept": True})
        assert r.status_code == 200, r.text
        finished = await frames_until(ws, "finished")
    frames = waiting + finished
    assert SECRET not in json.dumps(frames)
    deltas = "".join(f["content"] or "" for f in frames if f["kind"] == "StreamingDeltaEvent")
    assert deltas == "Let me look.All done."
    messages = [f["llm_message"]["content"][0]["text"] for f in frames
                if f["kind"] == "MessageEvent" and f["source"] == "agent"]
    assert messages == ["Let me look.", "All done."]
    calls = [(f["tool_call_id"], f["status"]) for f in frames if f["kind"] == "ACPToolCallEvent"]
    assert ("call-1", "completed") in calls and ("call-3", "completed") in calls
    env_call = [f for f in frames if f["kind"] == "ACPToolCallEvent"
                and f["tool_call_id"] == "call-2"][-1]
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
