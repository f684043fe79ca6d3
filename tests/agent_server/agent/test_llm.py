"""agent_server.agent.llm: litellm calls, retries and failures (no real network).

litellm runs its whole request path against the scripted HTTP LLM on a loopback port
(tests/support/llm.py); the backoff schedule is read through the `sleep` seam, so no test
waits for a retry.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agent_server.agent import llm as llm_module
from agent_server.agent.llm import BACKOFF, LLMFailure
from agent_server.agent.spec import LLMConfig
from tests.support.llm import ScriptedLLM, call, error, free_port, text

MESSAGES = [{"role": "user", "content": "hi"}]


class Sleeps(list[float]):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def config(base_url: str, **extra: Any) -> LLMConfig:
    return LLMConfig.model_validate(
        {
            "model": "openai/test-model",
            "base_url": base_url,
            "api_key": "sk-very-secret-key",
            **extra,
        }
    )


@pytest.fixture
def key() -> str:
    return uuid.uuid4().hex[:12]


async def test_a_reply_with_a_tool_call(llm: ScriptedLLM, key: str) -> None:
    llm.script(key, call("think", "thinking first", thought="hm"))
    sleeps = Sleeps()
    reply = await llm_module.complete(config(llm.base_url(key)), MESSAGES, [], sleep=sleeps)
    assert reply.content == "thinking first"
    [tool_call] = reply.tool_calls
    assert (tool_call.name, tool_call.arguments) == ("think", '{"thought": "hm"}')
    assert reply.usage.prompt_tokens > 0
    assert sleeps == []
    assert llm.requests_for(key)[0]["messages"] == MESSAGES


async def test_server_errors_are_retried_with_growing_jittered_waits(
    llm: ScriptedLLM, key: str
) -> None:
    llm.script(key, error(503), error(500), error(502), text("finally"))
    sleeps = Sleeps()
    reply = await llm_module.complete(
        config(llm.base_url(key), num_retries=3), MESSAGES, [], sleep=sleeps
    )
    assert reply.content == "finally"
    assert len(sleeps) == 3
    for attempt, wait in enumerate(sleeps, start=1):
        assert 0.5 <= wait <= min(30.0, 2 ** (attempt - 1)), (attempt, wait)
    assert len(llm.requests_for(key)) == 4


async def test_retry_after_is_honoured(llm: ScriptedLLM, key: str) -> None:
    llm.script(key, error(429, "slow down", retry_after=7), text("ok"))
    sleeps = Sleeps()
    reply = await llm_module.complete(config(llm.base_url(key)), MESSAGES, [], sleep=sleeps)
    assert reply.content == "ok"
    assert sleeps == [7.0]


async def test_retries_run_out_into_a_failure_without_the_key(llm: ScriptedLLM, key: str) -> None:
    llm.script(key, *[error(503, "down for sk-very-secret-key")] * 3)
    sleeps = Sleeps()
    with pytest.raises(LLMFailure) as caught:
        await llm_module.complete(
            config(llm.base_url(key), num_retries=2), MESSAGES, [], sleep=sleeps
        )
    assert caught.value.code == "ServiceUnavailableError"
    assert "sk-very-secret-key" not in caught.value.detail
    assert len(sleeps) == 2
    assert len(llm.requests_for(key)) == 3


async def test_an_authentication_error_is_not_retried(llm: ScriptedLLM, key: str) -> None:
    llm.script(key, error(401, "bad key"))
    sleeps = Sleeps()
    with pytest.raises(LLMFailure) as caught:
        await llm_module.complete(config(llm.base_url(key)), MESSAGES, [], sleep=sleeps)
    assert caught.value.code == "AuthenticationError"
    assert sleeps == []
    assert len(llm.requests_for(key)) == 1


async def test_a_refused_connection_is_retried_then_fails() -> None:
    port = free_port()  # nothing listens on it
    sleeps = Sleeps()
    with pytest.raises(LLMFailure) as caught:
        await llm_module.complete(
            config(f"http://127.0.0.1:{port}/v1", num_retries=2), MESSAGES, [], sleep=sleeps
        )
    # litellm reports a refused connection to an OpenAI-compatible server this way.
    assert caught.value.code == "InternalServerError"
    # Said by httpx (our transport), not aiohttp: what matters is that it names the failure.
    assert "connection attempts failed" in caught.value.detail.lower()
    assert len(sleeps) == 2


def test_the_llm_backoff_bounds() -> None:
    assert BACKOFF.wait(1, 7.5) == 7.5
    assert BACKOFF.wait(1, 10_000) == 120.0  # a Retry-After is capped
    assert BACKOFF.wait(1, -3) == 0.0  # a date in the past
    for attempt in range(1, 12):
        assert 0.5 <= BACKOFF.wait(attempt, None) <= min(30.0, 2 ** (attempt - 1))


async def test_the_responses_api_honours_retry_after_and_keeps_the_key_out_of_failures(
    llm: ScriptedLLM, key: str
) -> None:
    """A GPT-5 model's calls go to `/responses`, with the same retries as chat completions."""
    llm.script(key, error(429, retry_after=0.2), text("ok"), error(401, "bad sk-very-secret-key"))
    sleeps = Sleeps()
    gpt5 = config(llm.base_url(key), model="openai/gpt-5-mini")
    reply = await llm_module.complete(gpt5, MESSAGES, [], sleep=sleeps)
    assert reply.content == "ok" and sleeps == [0.2]
    assert llm.requests_for(key)[0]["input"][0]["content"][0] == {
        "type": "input_text",
        "text": "hi",
    }
    with pytest.raises(LLMFailure) as failed:
        await llm_module.complete(gpt5, MESSAGES, [], sleep=sleeps)
    assert failed.value.code == "AuthenticationError" and sleeps == [0.2]
    assert "sk-very-secret-key" not in failed.value.detail
