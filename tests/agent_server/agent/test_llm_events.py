"""LLMCompletionLogEvent and TokenEvent (SPEC 6.2) from a real server, through litellm, from
the scripted OpenAI-compatible LLM (which returns token ids the way vLLM does when asked).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from core.masking import MASK
from tests.conftest import create
from tests.support.api import events, send, wait_status
from tests.support.llm import Reply, ScriptedLLM, call, prompt_text, text, token_ids
from tests.support.server import KEY, ServerProcess

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

#: A conversation secret with the characters JSON escapes: inside tool-call arguments it is
#: escaped twice in a completion log.
SECRET = 'pa"ss\\w0rd-4242'
LLM_KEY = "sk-test-key"  # what tests.conftest.agent_spec sends


def run(
    client: httpx.Client, llm: ScriptedLLM, key: str, workspace: Path, *replies: Reply, **extra: Any
) -> str:
    llm.script(key, *replies)
    conv = create(client, llm, key, workspace, **extra)
    send(client, conv["id"], "please begin")
    assert wait_status(client, conv["id"]) == "finished"
    return str(conv["id"])


# -- completion logs -------------------------------------------------------------------------


def test_each_call_is_logged_when_asked(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    cid = run(
        client,
        llm,
        key,
        tmp_path,
        call("think", "thinking first", thought=f"the password is {SECRET}"),
        text(f"done; it was {SECRET}"),
        llm_extra={"log_completions": True, "temperature": 0.5},
        secrets={"PASSWORD": SECRET},
    )
    logs = events(client, cid, "LLMCompletionLogEvent")
    requests = llm.requests_for(key)
    assert len(logs) == len(requests) == 2
    for log, request in zip(logs, requests):
        assert (log["model_name"], log["usage_id"], log["source"]) == (
            "openai/test-model",
            "default",
            "environment",
        )
        assert re.fullmatch(r"openai__test-model-\d+\.\d{3}-[0-9a-f]{4}\.json", log["filename"])
        data = json.loads(log["log_data"])
        # The request as the server received it, the parameters without the key.
        assert data["messages"] == request["messages"]
        assert [t["function"]["name"] for t in data["tools"]] == [
            t["function"]["name"] for t in request["tools"]
        ]
        assert data["kwargs"]["model"] == "openai/test-model"
        assert data["kwargs"]["temperature"] == 0.5
        assert "api_key" not in data["kwargs"]
        assert data["usage_summary"]["prompt_tokens"] > 0
        assert data["latency_sec"] >= 0 and "truncated" not in data
    first, second = (json.loads(log["log_data"])["response"] for log in logs)
    [tool_call] = first["choices"][0]["message"]["tool_calls"]
    assert json.loads(tool_call["function"]["arguments"]) == {"thought": f"the password is {MASK}"}
    assert second["choices"][0]["message"]["content"] == f"done; it was {MASK}"
    # Neither the secret, in any of its escapings, nor the LLM's key is anywhere.
    everything = json.dumps(events(client, cid))
    for form in (SECRET, json.dumps(SECRET)[1:-1], json.dumps(json.dumps(SECRET))[1:-1], LLM_KEY):
        assert form not in everything
        assert all(form not in log["log_data"] for log in logs)


def test_nothing_is_logged_by_default(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    cid = run(client, llm, key, tmp_path, call("think", thought="hm"), text("done"))
    assert events(client, cid, "LLMCompletionLogEvent") == []
    assert events(client, cid, "TokenEvent") == []
    assert "return_token_ids" not in llm.requests_for(key)[0]


def test_a_failed_call_is_logged_with_its_error(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, Reply(status=401, error=f"bad key {LLM_KEY}"))
    conv = create(client, llm, key, tmp_path, llm_extra={"log_completions": True})
    send(client, conv["id"], "go")
    assert wait_status(client, conv["id"]) == "error"
    [log] = events(client, conv["id"], "LLMCompletionLogEvent")
    assert log["filename"].endswith("-error.json")
    data = json.loads(log["log_data"])
    assert data["error"]["type"] == "AuthenticationError"
    assert "bad key" in data["error"]["message"] and LLM_KEY not in log["log_data"]
    assert "response" not in data


def test_a_log_too_long_is_cut_and_says_so(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    cid = run(client, llm, key, tmp_path, text("x" * 400_000), llm_extra={"log_completions": True})
    [log] = events(client, cid, "LLMCompletionLogEvent")
    assert len(log["log_data"]) <= 256 * 1024
    data = json.loads(log["log_data"])
    assert data["truncated"]["original_chars"] > 400_000
    assert "strings cut" in data["truncated"]["how"]
    content = data["response"]["choices"][0]["message"]["content"]
    assert content.startswith("xxxx") and content.endswith("characters cut]")


async def test_completion_logs_reach_websocket_clients(
    server: ServerProcess, client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    cid = await asyncio.to_thread(
        run, client, llm, key, tmp_path, text("hi"), llm_extra={"log_completions": True}
    )
    [stored] = await asyncio.to_thread(events, client, cid, "LLMCompletionLogEvent")
    async with connect(
        f"ws://127.0.0.1:{server.port}/sockets/events/{cid}?resend_all=true",
        additional_headers={"X-Session-API-Key": KEY},
        max_size=None,
        proxy=None,
    ) as ws:
        async with asyncio.timeout(10):
            while (frame := json.loads(await ws.recv()))["kind"] != "LLMCompletionLogEvent":
                pass
    assert frame == stored


# -- token ids -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ask",
    [{"return_token_ids": True}, {"litellm_extra_body": {"return_token_ids": True}}],
    ids=["return_token_ids", "litellm_extra_body"],
)
def test_token_ids_from_the_server_become_token_events(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, ask: dict[str, Any]
) -> None:
    cid = run(
        client,
        llm,
        key,
        tmp_path,
        call("think", thought="a b c"),
        text("all done now"),
        llm_extra=ask,
    )
    requests = llm.requests_for(key)
    assert [r["return_token_ids"] for r in requests] == [True, True]  # vLLM's parameter
    tokens = events(client, cid, "TokenEvent")
    assert len(tokens) == 2
    expected_answers = [token_ids('think {"thought": "a b c"}'), token_ids("all done now")]
    for event, request, answer in zip(tokens, requests, expected_answers):
        assert event["source"] == "agent"
        assert event["prompt_token_ids"] == token_ids(prompt_text(request))
        assert event["response_token_ids"] == answer
    # Each TokenEvent comes before the events of its response.
    kinds = [
        e["kind"]
        for e in events(client, cid)
        if e["kind"] in ("TokenEvent", "ActionEvent", "MessageEvent")
    ]
    assert kinds == ["MessageEvent", "TokenEvent", "ActionEvent", "TokenEvent", "MessageEvent"]


def test_extra_body_fields_reach_the_server(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    cid = run(
        client,
        llm,
        key,
        tmp_path,
        text("done"),
        llm_extra={"litellm_extra_body": {"top_k": 5, "chat_template_kwargs": {"a": 1}}},
    )
    [request] = llm.requests_for(key)
    assert (request["top_k"], request["chat_template_kwargs"]) == (5, {"a": 1})
    assert "return_token_ids" not in request
    assert events(client, cid, "TokenEvent") == []


@pytest.mark.parametrize(
    "llm_extra",
    [
        {"return_token_ids": True, "stream": True},
        {"litellm_extra_body": {"return_token_ids": True}, "stream": True},
    ],
)
def test_token_ids_with_streaming_is_422(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, llm_extra: dict[str, Any]
) -> None:
    body = {
        "agent": {
            "llm": {"model": "openai/m", "base_url": llm.base_url(key), "api_key": "k", **llm_extra}
        },
        "workspace": {"working_dir": str(tmp_path)},
    }
    r = client.post("/api/conversations", json=body)
    assert r.status_code == 422, r.text
    [problem] = r.json()["detail"]
    assert problem["loc"][:3] == ["body", "agent", "llm"]
    assert "return_token_ids needs stream false" in problem["msg"]
