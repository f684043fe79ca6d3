"""The one LLM call: messages and tool schemas in, a completed response out, through litellm.

litellm is imported on first use (`litellm_setup`). Retries are ours, not litellm's, so that
Retry-After is honoured, the jitter is known, and an interrupt cancels a wait as promptly as a
call.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from agent_server.agent import responses, transport
from agent_server.agent.litellm_setup import load
from agent_server.agent.spec import LLMConfig
from agent_server.agent.usage import TokenUsage
from agent_server.telemetry.tracing import note_llm_provider, note_llm_retry
from core.masking import REDACTED
from core.retry import Backoff, parse_retry_after
from web.errors import UpstreamError

logger = logging.getLogger(__name__)


class LLMFailure(UpstreamError):
    """The LLM call failed for good; `code` names the error class (never holds a secret)."""


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str
    #: The Responses API's id of the call's output item (its `call_id` is `id`).
    item_id: str | None = None


@dataclass
class Completion:
    response_id: str
    content: str
    tool_calls: list[ToolCall]
    reasoning_content: str | None
    thinking_blocks: list[dict[str, Any]]
    usage: TokenUsage
    cost: float
    latency: float
    raw: Any = field(repr=False, default=None)
    #: The exact token ids of prompt and answer, when the server sent both (vLLM does when
    #: asked: LLMConfig.return_token_ids).
    prompt_token_ids: list[int] | None = None
    response_token_ids: list[int] | None = None
    #: The Responses API's reasoning item (`ReasoningItemModel`'s fields), sent back next turn.
    reasoning_item: dict[str, Any] | None = None


#: Seam for tests of the backoff schedule; the loop uses asyncio.sleep.
Sleep = Callable[[float], Any]

#: Full jitter from 0.5 s up to 30 s; a provider's Retry-After is obeyed up to two minutes
#: (rate limits often ask for a minute), but no longer: the run must not look hung.
BACKOFF = Backoff(minimum=1.0, maximum=30.0, full_jitter=True, retry_after_bounds=(0.0, 120.0))

#: Told (the error's class, the seconds until the next attempt) before each retry of a call
#: made in this task: the loop sets it so clients can say "retrying in N s".
ON_RETRY: ContextVar[Callable[[str, float], None] | None] = ContextVar("on_retry", default=None)


def _retry_after(exc: Exception) -> float | None:
    headers: Any = getattr(exc, "litellm_response_headers", None)
    response = getattr(exc, "response", None)
    if not headers and response is not None:
        headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after") or headers.get("Retry-After")
    return None if value is None else parse_retry_after(str(value), time.time())


def _retryable(litellm: Any, exc: Exception) -> bool:
    if isinstance(
        exc,
        (
            litellm.AuthenticationError,
            litellm.PermissionDeniedError,
            litellm.NotFoundError,
            litellm.ContextWindowExceededError,
        ),
    ):
        return False
    if isinstance(
        exc,
        (
            litellm.RateLimitError,
            litellm.Timeout,
            litellm.APIConnectionError,
            litellm.InternalServerError,
            litellm.ServiceUnavailableError,
            litellm.BadGatewayError,
        ),
    ):
        return True
    if isinstance(exc, litellm.BadRequestError):
        return False
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status in (408, 409, 429) or status >= 500)


#: Providers whose litellm path is its own HTTP handler (it takes an AsyncHTTPHandler as
#: `client`): OpenAI-compatible servers and Anthropic's API. Others keep litellm's client.
QUICKACK_PROVIDERS = frozenset({"openai", "anthropic"})


def _provider(litellm: Any, config: LLMConfig) -> str | None:
    try:
        return str(litellm.get_llm_provider(model=config.model, api_base=config.base_url)[1])
    except Exception:  # litellm cannot tell: its own call will say why
        return None


def _failure(exc: Exception, secrets: list[str]) -> LLMFailure:
    detail = str(exc)
    for secret in secrets:
        if secret:
            detail = detail.replace(secret, REDACTED)
    # Kept long: the conversation masks its own secrets in it before cutting it to size.
    return LLMFailure(type(exc).__name__, detail[:20000])


def _reach(config: LLMConfig, base_name: str) -> dict[str, Any]:
    """The key and the base URL, as litellm's call takes them (`base_name`: chat completions
    say `base_url`, `aresponses` `api_base`)."""
    reach: dict[str, Any] = {}
    if config.api_key is not None:
        reach["api_key"] = config.api_key.get_secret_value()
    if config.base_url:
        reach[base_name] = config.base_url
    return reach


def _kwargs(
    config: LLMConfig, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> dict[str, Any]:
    if any(responses.REASONING_ITEM in m for m in messages):  # from a Responses API model
        messages = [{k: v for k, v in m.items() if k != responses.REASONING_ITEM} for m in messages]
    kwargs: dict[str, Any] = {
        "model": config.model,
        "messages": messages,
        "num_retries": 0,
        "max_retries": 0,
        # Our tools are plain functions, never litellm's MCP gateway: without this, the first
        # call with tools imports that gateway (its MCP server, auth, crypto, telemetry),
        # 225 modules and ~65 MB a conversation never uses.
        "_skip_mcp_handler": True,
    }
    if tools:
        kwargs["tools"] = tools
    kwargs.update(_reach(config, "base_url"))
    if config.temperature is not None:
        kwargs["temperature"] = config.temperature
    if config.max_output_tokens is not None:
        kwargs["max_tokens"] = config.max_output_tokens
    if config.reasoning_effort is not None:
        kwargs["reasoning_effort"] = config.reasoning_effort
    if config.timeout is not None:
        kwargs["timeout"] = config.timeout
    if config.stream:
        kwargs["stream"] = True
        kwargs["stream_options"] = {"include_usage": True}
    extra_body = dict(config.litellm_extra_body)
    if config.return_token_ids:
        extra_body["return_token_ids"] = True
    if extra_body:
        kwargs["extra_body"] = extra_body
    return kwargs


async def complete(
    config: LLMConfig,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    on_delta: Callable[[str | None, str | None], None] | None = None,
    sleep: Sleep = asyncio.sleep,
) -> Completion:
    """One model response, retried on rate limits, server errors and timeouts."""
    litellm = await load()
    via_responses = responses.uses_responses_api(config)
    if via_responses:
        kwargs = {**responses.request(config, messages, tools), **_reach(config, "api_base")}
    else:
        kwargs = _kwargs(config, messages, tools)
    provider = _provider(litellm, config)
    note_llm_provider(provider)  # the call's span says which provider served it
    if provider in QUICKACK_PROVIDERS and not via_responses:
        kwargs["client"] = transport.client(litellm)
    secrets = [config.api_key.get_secret_value()] if config.api_key else []
    attempt = 0
    while True:
        attempt += 1
        started = time.perf_counter()
        try:
            if via_responses:
                if config.stream:
                    response = await responses.stream(litellm, kwargs, on_delta)
                else:
                    response = await litellm.aresponses(**kwargs)
                return _from_responses(litellm, config, response, time.perf_counter() - started)
            if config.stream:
                response = await _stream(litellm, kwargs, on_delta)
            else:
                response = await litellm.acompletion(**kwargs)
            return _completion(litellm, config, response, time.perf_counter() - started)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not _retryable(litellm, exc) or attempt > config.num_retries:
                raise _failure(exc, secrets) from None
            wait = BACKOFF.wait(attempt, _retry_after(exc))
            logger.info(
                "LLM call failed (%s); retry %d in %.1fs", type(exc).__name__, attempt, wait
            )
            note_llm_retry(type(exc).__name__, wait)
            if (told := ON_RETRY.get()) is not None:
                told(type(exc).__name__, wait)
            await sleep(wait)


async def _stream(litellm: Any, kwargs: dict[str, Any], on_delta: Any) -> Any:
    chunks = []
    stream = await litellm.acompletion(**kwargs)
    async for chunk in stream:
        chunks.append(chunk)
        if on_delta is None or not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text = getattr(delta, "content", None)
        reasoning = getattr(delta, "reasoning_content", None)
        if text or reasoning:
            on_delta(text, reasoning)
    return litellm.stream_chunk_builder(chunks, messages=kwargs["messages"])


def _usage(response: Any, model: str) -> TokenUsage:
    usage = getattr(response, "usage", None)
    if usage is None:
        return TokenUsage(model=model, response_id=getattr(response, "id", "") or "")

    def num(obj: Any, name: str) -> int:
        value = getattr(obj, name, None) if obj is not None else None
        return int(value) if isinstance(value, (int, float)) else 0

    prompt_details = getattr(usage, "prompt_tokens_details", None)
    completion_details = getattr(usage, "completion_tokens_details", None)
    prompt = num(usage, "prompt_tokens")
    completion = num(usage, "completion_tokens")
    return TokenUsage(
        model=model,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cache_read_tokens=num(prompt_details, "cached_tokens")
        or num(usage, "cache_read_input_tokens"),
        cache_write_tokens=num(usage, "cache_creation_input_tokens"),
        reasoning_tokens=num(completion_details, "reasoning_tokens"),
        per_turn_token=prompt + completion,
        response_id=getattr(response, "id", "") or "",
    )


def _completion(litellm: Any, config: LLMConfig, response: Any, latency: float) -> Completion:
    choice = response.choices[0]
    message = choice.message
    calls = []
    for i, call in enumerate(getattr(message, "tool_calls", None) or []):
        calls.append(
            ToolCall(
                id=call.id or f"call_{response.id}_{i}",
                name=call.function.name or "",
                arguments=call.function.arguments or "{}",
            )
        )
    try:
        cost = float(litellm.completion_cost(completion_response=response) or 0.0)
    except Exception:  # models missing from the price map cost nothing we can know
        cost = 0.0
    blocks = getattr(message, "thinking_blocks", None) or []
    ids = _token_ids(response, choice)
    return Completion(
        response_id=response.id or f"resp-{time.time_ns()}",
        content=message.content or "",
        tool_calls=calls,
        reasoning_content=getattr(message, "reasoning_content", None),
        thinking_blocks=[dict(b) for b in blocks],
        usage=_usage(response, config.model),
        cost=cost,
        latency=latency,
        raw=response,
        prompt_token_ids=ids.get("prompt_token_ids"),
        response_token_ids=ids.get("response_token_ids"),
    )


def _from_responses(litellm: Any, config: LLMConfig, response: Any, latency: float) -> Completion:
    text, calls = responses.parts(response)
    item = responses.reasoning_item(response)
    figures = responses.usage_figures(response)
    response_id = str(getattr(response, "id", "") or f"resp-{time.time_ns()}")
    try:
        cost = float(
            litellm.completion_cost(completion_response=response, call_type="aresponses") or 0.0
        )
    except Exception:  # models missing from the price map cost nothing we can know
        cost = 0.0
    return Completion(
        response_id=response_id,
        content=text,
        tool_calls=[
            ToolCall(
                id=call_id or f"call_{response_id}_{i}",
                name=name,
                arguments=arguments,
                item_id=item_id,
            )
            for i, (call_id, name, arguments, item_id) in enumerate(calls)
        ],
        reasoning_content="\n\n".join(item["summary"]) if item and item["summary"] else None,
        thinking_blocks=[],
        usage=TokenUsage(
            model=config.model,
            prompt_tokens=figures["prompt"],
            completion_tokens=figures["completion"],
            cache_read_tokens=figures["cached"],
            reasoning_tokens=figures["reasoning"],
            per_turn_token=figures["prompt"] + figures["completion"],
            response_id=response_id,
        ),
        cost=cost,
        latency=latency,
        raw=response,
        reasoning_item=item,
    )


def _token_ids(response: Any, choice: Any) -> dict[str, list[int]]:
    """vLLM's `prompt_token_ids` and `choices[0].token_ids`, as litellm passes them on (the
    first as is, the second among the choice's provider_specific_fields); both or neither."""
    fields = getattr(choice, "provider_specific_fields", None) or {}
    prompt = _ids(getattr(response, "prompt_token_ids", None))
    answer = _ids(fields.get("token_ids") if isinstance(fields, dict) else None)
    if prompt is None or answer is None:
        return {}
    return {"prompt_token_ids": prompt, "response_token_ids": answer}


def _ids(value: Any) -> list[int] | None:
    """`value` when it is a list of integers (token ids), None otherwise."""
    if isinstance(value, list) and all(type(v) is int for v in value):
        return list(value)
    return None
