"""agent_server.agent.llm_log: completion logs and token ids as events, in-process.

The end-to-end path (litellm, the scripted LLM server, search and sockets) is in
test_llm_events.py beside this one; here the bounds, and the same events from the
ScriptedModel.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from agent_server.agent.llm import Completion
from agent_server.agent.llm_log import LOG_DATA_LIMIT, MAX_TOKEN_IDS, fit, token_event
from agent_server.agent.model import Scripted
from agent_server.agent.usage import TokenUsage
from agent_server.record import SendMessage
from core.masking import MASK
from events import LLMCompletionLogEvent, TokenEvent
from tests.support.inprocess import InProcess, agent, events, new_conversation, run_ends


def completion(prompt: list[int] | None, response: list[int] | None) -> Completion:
    return Completion(
        response_id="r1",
        content="",
        tool_calls=[],
        reasoning_content=None,
        thinking_blocks=[],
        usage=TokenUsage(),
        cost=0.0,
        latency=0.0,
        prompt_token_ids=prompt,
        response_token_ids=response,
    )


def record(n_messages: int, size: int, n_tools: int = 5) -> dict[str, Any]:
    return {
        "messages": [{"role": "system", "content": "S" * size}]
        + [{"role": "user", "content": f"{i} " + "m" * size} for i in range(n_messages)],
        "tools": [
            {"type": "function", "function": {"name": f"tool{i}", "description": "d" * size}}
            for i in range(n_tools)
        ],
        "kwargs": {"model": "m"},
        "response": {"choices": [{"message": {"content": "the answer"}}]},
        "cost": 0.5,
        "timestamp": 1.0,
        "latency_sec": 0.25,
        "usage_summary": {"prompt_tokens": 10},
    }


def test_a_log_within_the_limit_is_kept_whole() -> None:
    data = record(3, 100)
    assert json.loads(fit(data, LOG_DATA_LIMIT)) == data


@pytest.mark.parametrize(
    ("n_messages", "size", "n_tools", "how"),
    [
        (3, 12_000, 5, "tools listed by name"),
        (6, 20_000, 5, "strings cut to 8192 characters"),
        (2_000, 500, 5, "messages after the first left out"),
        (3, 10, 20_000, "only the summary fields kept"),
    ],
)
def test_a_long_log_is_cut_to_valid_json_that_says_how(
    n_messages: int, size: int, n_tools: int, how: str
) -> None:
    limit = 64 * 1024
    text = fit(record(n_messages, size, n_tools), limit)
    assert len(text) <= limit
    data = json.loads(text)
    assert data["truncated"]["how"].endswith(how)
    assert data["truncated"]["original_chars"] > limit
    assert data["usage_summary"] == {"prompt_tokens": 10}
    if "summary" not in how:
        assert data["response"]["choices"][0]["message"]["content"] == "the answer"
        assert data["messages"][0]["role"] == "system"
        # The newest messages are kept, as many as fit, without a gap.
        kept = [int(m["content"].split()[0]) for m in data["messages"][1:]]
        assert kept == list(range(n_messages - len(kept), n_messages))
        if "left out" in how:
            assert len(kept) > 50 and len(text) > limit * 0.9
            omitted = int(data["truncated"]["how"].split("; ")[-1].split()[0])
            assert omitted == n_messages - len(kept)


def test_token_ids_are_kept_up_to_the_bound(caplog: pytest.LogCaptureFixture) -> None:
    event = token_event(completion([1] * MAX_TOKEN_IDS, [2, 3]))
    assert event is not None and len(event.prompt_token_ids) == MAX_TOKEN_IDS
    assert token_event(completion(None, [1])) is None
    assert token_event(completion([1], None)) is None
    with caplog.at_level(logging.WARNING, logger="agent_server.agent.llm_log"):
        assert token_event(completion([1], [2] * (MAX_TOKEN_IDS + 1))) is None
    assert f"1 prompt and {MAX_TOKEN_IDS + 1} response ids" in caplog.text


async def test_the_scripted_model_s_calls_are_logged_and_masked(
    srv: InProcess, tmp_path: Path
) -> None:
    secret = 'q"uote\\d-secret'
    srv.model.script += [
        Scripted(calls=[("think", json.dumps({"thought": secret}))]),
        Scripted(content="done"),
    ]
    conv = await new_conversation(
        srv,
        tmp_path / "ws",
        secrets={"S": secret},
        agent=agent(log_completions=True, usage_id="main"),
    )
    await conv.send_message(
        SendMessage.model_validate({"content": [{"type": "text", "text": "go"}], "run": True})
    )
    await run_ends(conv)
    logs = await events(conv, LLMCompletionLogEvent)
    assert len(logs) == len(srv.model.requests) == 2
    assert [log.usage_id for log in logs] == ["main", "main"]
    first = json.loads(logs[0].log_data)
    assert first["response"]["tool_calls"][0]["arguments"] == json.dumps({"thought": MASK})
    assert all(json.dumps(json.dumps(secret))[1:-1] not in log.log_data for log in logs)
    assert await events(conv, TokenEvent) == []  # the scripted model sends no ids


@pytest.mark.parametrize("key", ["sk-scripted-key-123", 'sk-"odd\\key-123'])
async def test_an_echoed_llm_key_is_masked_in_the_log(
    srv: InProcess, tmp_path: Path, key: str
) -> None:
    srv.model.script += [
        Scripted(calls=[("think", json.dumps({"thought": f"key {key}"}))]),
        Scripted(content=f"my key is {key}"),
    ]
    conv = await new_conversation(
        srv, tmp_path / "ws", agent=agent(log_completions=True, api_key=key)
    )
    await conv.send_message(
        SendMessage.model_validate({"content": [{"type": "text", "text": "go"}], "run": True})
    )
    await run_ends(conv)
    logs = await events(conv, LLMCompletionLogEvent)
    assert len(logs) == 2
    for log in logs:
        for form in (key, json.dumps(key)[1:-1], json.dumps(json.dumps(key))[1:-1]):
            assert form not in log.log_data
    assert json.loads(logs[1].log_data)["response"]["content"] == f"my key is {MASK}"
