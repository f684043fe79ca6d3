"""Driving the in-process server's routes (tests.support.inprocess.app_client) whose model
answers from a script (agent_server.agent.model.ScriptedModel): scripted tool calls,
conversations made and read through the API, statuses waited for.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from agent_server.agent.model import Scripted

RESTING = ("finished", "error", "stuck", "paused", "idle", "waiting_for_confirmation")


def tool_call(name: str, /, **arguments: Any) -> Scripted:
    return Scripted(calls=[(name, json.dumps(arguments))])


def finish(message: str = "done") -> Scripted:
    return tool_call("finish", message=message)


def llm(model: str = "scripted/main", **extra: Any) -> dict[str, Any]:
    return {"model": model, "api_key": "sk-main-key-0000", **extra}


def create(
    client: TestClient, workspace: Path, tools: list[Any], message: str | None = "go", **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "agent": {
            "llm": extra.pop("llm", llm()),
            "tools": [t if isinstance(t, dict) else {"name": t} for t in tools],
        },
        "workspace": {"working_dir": str(workspace)},
        **extra,
    }
    if message is not None:
        body["initial_message"] = {"content": [{"type": "text", "text": message}], "run": True}
    r = client.post("/api/conversations", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


def status(client: TestClient, cid: str) -> str:
    r = client.get(f"/api/conversations/{cid}")
    assert r.status_code == 200, r.text
    return str(r.json()["execution_status"])


def wait_status(client: TestClient, cid: str, *wanted: str, timeout: float = 30) -> str:
    targets = wanted or RESTING
    deadline = time.monotonic() + timeout
    while True:
        now = status(client, cid)
        if now in targets:
            return now
        if time.monotonic() > deadline:
            raise AssertionError(f"{cid} is {now!r}, not one of {targets}")
        time.sleep(0.02)


def events(client: TestClient, cid: str, kind: str | None = None) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"limit": 1000}
    if kind:
        params["kind__eq"] = kind
    r = client.get(f"/api/conversations/{cid}/events/search", params=params)
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


def observations(client: TestClient, cid: str) -> list[dict[str, Any]]:
    return [e for e in events(client, cid) if e["kind"] in ("ObservationEvent", "AgentErrorEvent")]


def text_of(event: dict[str, Any]) -> str:
    if event["kind"] == "AgentErrorEvent":
        return str(event["error"])
    return "".join(c.get("text", "") for c in event["observation"]["content"])
