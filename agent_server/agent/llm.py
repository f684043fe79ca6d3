"""The one LLM call: messages and tool schemas in, a completed response out, through litellm.

litellm takes seconds and ~170 MB to import, so it is imported on first use, in a thread
(the event loop keeps serving meanwhile). Retries are ours, not litellm's, so that Retry-After
is honoured, the jitter is known, and an interrupt cancels a wait as promptly as a call.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
import os
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from agent_server import tls
from agent_server.agent import responses, transport
from agent_server.agent.spec import LLMConfig
from agent_server.agent.usage import TokenUsage
from agent_server.telemetry.tracing import note_llm_provider, note_llm_retry
from core.masking import REDACTED
from core.retry import Backoff, parse_retry_after
from web.errors import UpstreamError

logger = logging.getLogger(__name__)

_import_lock = threading.Lock()
#: litellm once `_import` has set it up (None before: its module may be half-imported).
_litellm: Any = None
_prewarm_started = False


#: litellm's settings read from the environment, at import and at each call (so a process
#: forked after the import keeps them: `agent_server.template`).
ENVIRONMENT = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    # litellm's own HTTP handler for OpenAI-compatible calls: the OpenAI SDK's typed
    # transform of every request costs ~0.35 ms per message, which made each step slower
    # the longer a conversation got (170 ms per step at 500 steps; flat with this).
    "EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER": "True",
    # litellm's logging scans every message of every request for base64 to shorten; we
    # log no request bodies, so that work (growing with the conversation) is skipped.
    "MAX_BASE64_LENGTH_FOR_LOGGING": "0",
    # Not "DEV": litellm's import would read a `.env` file found by walking up from its own
    # package directory (the settings of whatever lies above the installation).
    "LITELLM_MODE": "PRODUCTION",
}


def _import() -> Any:
    global _litellm
    with _import_lock:  # one import even when several runs start together
        if _litellm is not None:
            return _litellm
        for name, value in ENVIRONMENT.items():
            os.environ.setdefault(name, value)
        # The import allocates a few hundred thousand long-lived objects: the collector would
        # walk them again and again meanwhile (a fifth of the import's time), for nothing.
        collecting = gc.isenabled()
        gc.disable()
        try:
            module: Any = importlib.import_module("litellm")
            module.telemetry = False
            module.suppress_debug_info = True
            for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
                logging.getLogger(name).setLevel(logging.WARNING)
            module.drop_params = True
            _lazy_tokenizer()
            _first_call()
            # Without this every full collection walks all that litellm left behind (tens of
            # ms, more often the more a step allocates). No collection first: it would walk
            # them all once (~0.25 s, the first model call waiting) to free ~1,000 objects.
            gc.freeze()
        finally:
            if collecting:
                gc.enable()
        _litellm = module
        return module


#: What a first model call imports besides litellm itself (anyio's backend, and what litellm
#: loads on its first completion; measured with a profile of a server's first conversation,
#: and held complete by a test). A name another litellm version lacks is skipped.
FIRST_CALL = (
    "anyio._backends._asyncio",
    "anyio.streams.tls",
    "anyio.streams.memory",
    "litellm.proxy._types",
    "litellm.proxy.types_utils.utils",
    "litellm.proxy.openai_files_endpoints.common_utils",
    "litellm.proxy._experimental.mcp_server.stdio_gate",
    "litellm.llms.litellm_proxy.chat.transformation",
    "litellm.llms.openai_like.dynamic_config",
    "litellm.llms.openai.chat.gpt_audio_transformation",
    "litellm.llms.vertex_ai.vertex_ai_partner_models.anthropic.transformation",
    "litellm.types.object_permission",
    "litellm.types.integrations.compression_interception",
    "litellm.types.proxy.carried_budget_state",
    "litellm.types.proxy.control_plane_endpoints",
    "litellm.types.proxy.spend_capture_rate",
    "litellm._service_logger",
    "litellm.integrations.prometheus_services",
    "litellm.types.integrations.prometheus",
)


def _first_call() -> None:
    """What the first call loads besides (~0.12 s): FIRST_CALL and the CA bundle, so that a
    conversation that comes after the import (the background one) waits for neither."""
    for name in FIRST_CALL:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    tls.client_context()


class _LazyEncoding:
    """litellm hands its default tokenizer (tiktoken's cl100k, ~45 MB resident) to every
    call, whether the call counts tokens or not, and a call to a server that reports its
    usage never does. This stands in for it and loads it on first real use."""

    def __init__(self, load: Callable[[], Any]) -> None:
        self._load = load
        self._encoding: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._encoding is None:
            self._encoding = self._load()
        return getattr(self._encoding, name)


def _lazy_tokenizer() -> None:
    main: Any = importlib.import_module("litellm.main")
    if getattr(main, "_encoding_cache", "absent") is None and "encoding" not in vars(main):
        main._encoding_cache = _LazyEncoding(main._load_default_encoding)


async def load() -> Any:
    """litellm, imported in a thread (its price map read from the package, not fetched)."""
    if _litellm is not None:
        return _litellm
    return await asyncio.to_thread(_import)


def load_now() -> Any:
    """litellm, imported in this thread (a template process loads it before it forks)."""
    return _import()


def prewarm() -> None:
    """Start importing litellm in the background (a conversation will probably run soon);
    once per process."""
    global _prewarm_started
    if _litellm is None and not _prewarm_started:
        _prewarm_started = True
        threading.Thread(target=_import, name="import-litellm", daemon=True).start()


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
