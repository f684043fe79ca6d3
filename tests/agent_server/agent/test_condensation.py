"""Condensation keeps long runs inside the context window without breaking a request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from agent_server.agent.condenser import estimate_tokens, fallback, rules
from agent_server.agent.spec import AgentSpec, CondenserConfig
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


def test_a_300_step_run_stays_under_the_window(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.responder = long_run_responder(300)
    try:
        conv = create(
            client,
            llm,
            key,
            tmp_path,
            message="count",
            run=True,
            max_iterations=400,
            llm_extra={},
            agent_condenser={"max_tokens": LIMIT},
        )
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


def test_condense_on_request(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, *[call("think", thought=f"t{i}") for i in range(6)], text("first part done"))
    conv = create(
        client, llm, key, tmp_path, message="go", run=True, agent_condenser={"enabled": False}
    )
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


def test_context_window_error_condenses_and_retries(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(
        key,
        *[call("think", thought=f"t{i}") for i in range(5)],
        error(
            400,
            "This model's maximum context length is 8192 tokens. However, your "
            "messages resulted in 9000 tokens.",
        ),
        text("summary"),
        call("finish", message="done"),
    )
    conv = create(
        client, llm, key, tmp_path, message="go", run=True, agent_condenser={"enabled": False}
    )
    assert wait_status(client, conv["id"]) == "finished"
    assert len(events(client, conv["id"], "Condensation")) == 1
    assert not events(client, conv["id"], "ConversationErrorEvent")


def test_max_events_holds_for_a_model_with_a_known_window(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(
        key,
        *[call("think", thought=f"t{i}") for i in range(12)],
        text("summary"),
        *[call("think", thought=f"u{i}") for i in range(3)],
        call("finish", message="ok"),
    )
    body = {
        "agent": {
            "llm": {"model": "openai/gpt-4o", "api_key": "sk-test", "base_url": llm.base_url(key)},
            "condenser": {"max_events": 20},
        },
        "workspace": {"working_dir": str(tmp_path)},
        "stuck_detection": False,
        "initial_message": {"content": [{"text": "go"}], "run": True},
    }
    conv = client.post("/api/conversations", json=body).json()
    assert wait_status(client, conv["id"]) == "finished"
    assert events(client, conv["id"], "Condensation")
    for r in llm.requests_for(key):
        if r.get("tools"):
            assert len(r["messages"]) <= 22
            check_valid(r["messages"])


# -- the OpenHands SDK's condenser kinds (issue 12) ---------------------------------------------


def test_condenser_kinds_are_accepted_and_echoed_with_their_kind() -> None:
    llm = {"model": "openai/m", "api_key": "sk-secret-value"}
    summarizing = {
        "kind": "LLMSummarizingCondenser",
        "llm": llm,
        "max_size": 40,
        "max_tokens": None,
        "keep_first": 2,
        "minimum_progress": 0.1,
        "hard_context_reset_max_retries": 5,
        "hard_context_reset_context_scaling": 0.8,
    }
    cases: list[tuple[Any, Any]] = [
        (None, None),
        ({"kind": "NoOpCondenser"}, "NoOpCondenser"),
        (summarizing, "LLMSummarizingCondenser"),
        (
            {"kind": "PipelineCondenser", "condensers": [{"kind": "NoOpCondenser"}, summarizing]},
            "PipelineCondenser",
        ),
        ({"max_events": 30}, "LLMSummarizingCondenser"),  # our own form, as the nearest kind
        ({"enabled": False}, "NoOpCondenser"),
    ]
    for given, kind in cases:
        agent = AgentSpec.model_validate({"llm": llm, "condenser": given})
        shown = agent.redacted()
        assert (shown["condenser"] or {}).get("kind") == kind, given
        assert "sk-secret-value" not in json.dumps(shown)
        assert shown["kind"] == "Agent" and shown["mcp_config"] == {}
    # Left out: our own defaults (on); null: none at all.
    assert isinstance(AgentSpec.model_validate({"llm": llm}).condenser, CondenserConfig)
    assert AgentSpec.model_validate({"llm": llm, "condenser": None}).condenser is None
    with pytest.raises(ValidationError, match="kind must be"):
        AgentSpec.model_validate({"llm": llm, "condenser": {"kind": "Nope"}})
    with pytest.raises(ValidationError, match="keep_first"):
        AgentSpec.model_validate({"llm": llm, "condenser": {**summarizing, "max_size": 4}})


def test_condenser_rules_follow_the_spec() -> None:
    summarizer = {
        "kind": "LLMSummarizingCondenser",
        "llm": {"model": "openai/small"},
        "max_size": 50,
        "max_tokens": 9000,
        "keep_first": 3,
    }
    spec = AgentSpec.model_validate(
        {
            "llm": {"model": "openai/agent"},
            "condenser": {
                "kind": "PipelineCondenser",
                "condensers": [{"kind": "NoOpCondenser"}, summarizer],
            },
        }
    )
    [rule] = rules(spec.condenser)
    assert rule.llm is not None
    assert (rule.llm.model, rule.max_events, rule.max_tokens, rule.keep_first, rule.max_share) == (
        "openai/small",
        50,
        9000,
        3,
        None,
    )
    # Our own form and the fallback use the conversation's LLM of the moment (llm None).
    assert rules(None) == [] and fallback(None).llm is None
    [ours] = rules(CondenserConfig(max_tokens=1000))
    assert ours.max_share == 0.75 and ours.keep_first is None and ours.llm is None


def test_a_null_condenser_never_condenses_on_its_own(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(
        key,
        *[call("think", thought=f"t{i}" + "x" * 400) for i in range(8)],
        call("finish", message="done"),
    )
    conv = create(client, llm, key, tmp_path, message="go", run=True, agent_condenser=None)
    assert conv["agent"]["condenser"] is None
    assert wait_status(client, conv["id"]) == "finished"
    assert not events(client, conv["id"], "Condensation")


def test_an_sdk_summarizing_condenser_condenses_past_max_size(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    # 2 + 2 * 6 = 14 messages before the 7th call: past 12, condensed to the head (2), the
    # summary and the last 6; two more steps stay under 12.
    llm.script(
        key,
        *[call("think", thought=f"t{i}") for i in range(6)],
        text("the summary"),
        call("think", thought="t6"),
        call("finish", message="done"),
    )
    summarizer = {
        "kind": "LLMSummarizingCondenser",
        "max_size": 12,
        "keep_first": 2,
        "llm": {
            "model": "openai/test-model",
            "base_url": llm.base_url(key),
            "api_key": "sk-test-key",
        },
    }
    conv = create(
        client,
        llm,
        key,
        tmp_path,
        message="go",
        run=True,
        agent_condenser=summarizer,
        stuck_detection=False,
    )
    assert conv["agent"]["condenser"]["kind"] == "LLMSummarizingCondenser"
    assert conv["agent"]["condenser"]["llm"]["api_key"] == "**********"
    assert wait_status(client, conv["id"]) == "finished"
    [condensation] = events(client, conv["id"], "Condensation")
    assert condensation["summary"] == "the summary" and condensation["summary_offset"] == 2
    for r in llm.requests_for(key):
        check_valid(r["messages"])
