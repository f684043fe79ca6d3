"""Condensation keeps long runs inside the context window without breaking a request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_server.agent.condenser import estimate_tokens
from tests.conftest import create
from tests.support.api import events, send, wait_status
from tests.support.llm import Reply, ScriptedLLM, call, error, text

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

LIMIT = 3000


def check_valid(messages: list[dict[str, Any]]) -> None:
    """Every tool result answers a call of the assistant message right before its results."""
    open_calls: list[str] = []
    for m in messages:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_calls, "a tool result without its call"
            open_calls.remove(m["tool_call_id"])
        else:
            assert not open_calls, f"calls left without results: {open_calls}"
            open_calls = [c["id"] for c in m.get("tool_calls") or []]
    assert messages[0]["role"] == "system"


def long_run_responder(steps: int):  # type: ignore[no-untyped-def]
    count = {"n": 0}

    def respond(key: str, body: dict[str, Any]) -> Reply:
        if not body.get("tools"):
            return text(f"Summary: the agent thought {count['n']} times about numbers.")
        count["n"] += 1
        if count["n"] > steps:
            return call("finish", message="done")
        return call("think", thought=f"step {count['n']}: " + "x" * 200)

    return respond


def test_a_300_step_run_stays_under_the_window(client: httpx.Client, llm: ScriptedLLM, key: str,
                                               tmp_path: Path) -> None:
    llm.responder = long_run_responder(300)
    try:
        conv = create(client, llm, key, tmp_path, message="count", run=True, max_iterations=400,
                      llm_extra={}, agent_condenser={"max_tokens": LIMIT})
        assert wait_status(client, conv["id"], timeout=180) == "finished"
    finally:
        llm.responder = None
    requests = llm.requests_for(key)
    agent_requests = [r for r in requests if r.get("tools")]
    assert len(agent_requests) == 301
    for r in requests:
        assert estimate_tokens(r["messages"], r.get("tools")) <= LIMIT
        check_valid(r["messages"])
    condensations = events(client, conv["id"], "Condensation")
    assert len(condensations) >= 5
    # The log keeps everything that was forgotten.
    assert len(events(client, conv["id"], "ActionEvent")) == 301
    last = agent_requests[-1]["messages"]
    assert last[1]["role"] == "user" and last[1]["content"][0]["text"] == "count"
    assert any("Summary: the agent thought" in str(m.get("content")) for m in last)


def test_condense_on_request(client: httpx.Client, llm: ScriptedLLM, key: str,
                             tmp_path: Path) -> None:
    llm.script(key, *[call("think", thought=f"t{i}") for i in range(6)], text("first part done"))
    conv = create(client, llm, key, tmp_path, message="go", run=True,
                  agent_condenser={"enabled": False})
    assert wait_status(client, conv["id"]) == "finished"
    r = client.post(f"/api/conversations/{conv['id']}/condense")
    assert r.status_code == 200
    assert events(client, conv["id"], "CondensationRequest")
    llm.script(key, text("a summary of thinking"), text("second part done"))
    send(client, conv["id"], "continue")
    assert wait_status(client, conv["id"], "finished") == "finished"
    condensation = events(client, conv["id"], "Condensation")[0]
    assert condensation["summary"] == "a summary of thinking"
    assert condensation["forgotten_event_ids"]
    final = llm.requests_for(key)[-1]["messages"]
    assert any("a summary of thinking" in str(m.get("content")) for m in final)
    check_valid(final)


def test_context_window_error_condenses_and_retries(client: httpx.Client, llm: ScriptedLLM,
                                                    key: str, tmp_path: Path) -> None:
    llm.script(key, *[call("think", thought=f"t{i}") for i in range(5)],
               error(400, "This model's maximum context length is 8192 tokens. However, your "
                          "messages resulted in 9000 tokens."),
               text("summary"), call("finish", message="done"))
    conv = create(client, llm, key, tmp_path, message="go", run=True,
                  agent_condenser={"enabled": False})
    assert wait_status(client, conv["id"]) == "finished"
    assert len(events(client, conv["id"], "Condensation")) == 1
    assert not events(client, conv["id"], "ConversationErrorEvent")


def test_max_events_holds_for_a_model_with_a_known_window(client: httpx.Client, llm: ScriptedLLM,
                                                          key: str, tmp_path: Path) -> None:
    llm.script(key, *[call("think", thought=f"t{i}") for i in range(12)], text("summary"),
               *[call("think", thought=f"u{i}") for i in range(3)], call("finish", message="ok"))
    body = {"agent": {"llm": {"model": "openai/gpt-4o", "api_key": "sk-test",
                              "base_url": llm.base_url(key)},
                      "condenser": {"max_events": 20}},
            "workspace": {"working_dir": str(tmp_path)}, "stuck_detection": False,
            "initial_message": {"content": [{"text": "go"}], "run": True}}
    conv = client.post("/api/conversations", json=body).json()
    assert wait_status(client, conv["id"]) == "finished"
    assert events(client, conv["id"], "Condensation")
    for r in llm.requests_for(key):
        if r.get("tools"):
            assert len(r["messages"]) <= 22
            check_valid(r["messages"])
