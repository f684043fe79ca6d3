"""LoggedModel: a conversation's LLM calls as events, when its LLM settings ask for them.

`log_completions` makes each call an LLMCompletionLogEvent: the request (messages, tools,
parameters) and the response, or the error, as one JSON string (`log_data`, the OpenHands
SDK's completion-log layout). `return_token_ids` makes each answer that carries the exact
token ids of prompt and response a TokenEvent. Both are off by default; with both off a call
goes straight through.

The log masks every stored event, but a secret inside `log_data` may sit in a JSON string
inside a JSON string (tool-call arguments), escaped twice, where masking the finished text
would miss it. So the data are masked before they are encoded, with the conversation's
secrets and the LLM's own key (which is never sent in the first place); the log's pass over
the finished string comes on top.

Both events are bounded: `log_data` to LOG_DATA_LIMIT characters, cut so that it stays valid
JSON and says what was cut (`truncated`); token id arrays to MAX_TOKEN_IDS each, past which no
TokenEvent is sent (a cut array would not be the exact ids it claims to be) and a warning is
logged.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent_server.agent.llm import Completion, LLMFailure
from agent_server.agent.model import Model, OnDelta, WrappedModel
from agent_server.agent.spec import LLMConfig
from core.masking import Masker, redact
from events import Event, LLMCompletionLogEvent, TokenEvent

if TYPE_CHECKING:
    from agent_server.agent.sink import EventSink

logger = logging.getLogger(__name__)

#: Characters of one event's `log_data` at most.
LOG_DATA_LIMIT = 256 * 1024
#: Token ids in each of a TokenEvent's arrays at most (a 256k-token context).
MAX_TOKEN_IDS = 256 * 1024
#: Request parameters shown in a log, besides messages and tools (never the key or client).
PARAMETERS = (
    "model",
    "base_url",
    "temperature",
    "max_output_tokens",
    "reasoning_effort",
    "timeout",
    "num_retries",
    "stream",
    "usage_id",
    "return_token_ids",
    "litellm_extra_body",
)


class LoggedModel(WrappedModel):
    """A Model whose calls become events in a conversation (see the module's docstring)."""

    def __init__(self, model: Model, sink: EventSink) -> None:
        super().__init__(model)
        self.sink = sink
        self._key_maskers: dict[str, Masker] = {}

    async def complete(
        self,
        config: LLMConfig,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_delta: OnDelta | None = None,
    ) -> Completion:
        if not (config.log_completions or config.wants_token_ids):
            return await self.model.complete(config, messages, tools, on_delta)
        started = time.time()
        try:
            reply = await self.model.complete(config, messages, tools, on_delta)
        except LLMFailure as failure:
            if config.log_completions:
                error = {"type": failure.code, "message": failure.detail}
                await self.sink.append(self._log(config, messages, tools, started, error=error))
            raise
        events: list[Event] = []
        if config.log_completions:
            events.append(self._log(config, messages, tools, started, reply=reply))
        if config.wants_token_ids:
            token = token_event(reply)
            if token is not None:
                events.append(token)
        if events:
            await self.sink.append(*events)
        return reply

    def _log(
        self,
        config: LLMConfig,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        started: float,
        reply: Completion | None = None,
        error: dict[str, str] | None = None,
    ) -> LLMCompletionLogEvent:
        data = self.sink.masker.data(log_record(config, messages, tools, started, reply, error))
        text = _dumps(data)
        if config.api_key is not None:
            key = config.api_key.get_secret_value()
            masker = self._key_masker(key)
            # The key is never put in; a provider may echo it. A key JSON leaves as it is
            # shows in the text wherever it is in the data (at any depth), so the text tells
            # whether the data need masking.
            if _escaped(key) != key or masker.text(text) != text:
                data = masker.data(data)
                text = _dumps(data)
        stamp = f"{time.time():.3f}-{uuid.uuid4().hex[:4]}"
        suffix = "-error.json" if error is not None else ".json"
        return LLMCompletionLogEvent(
            filename=f"{config.model.replace('/', '__')}-{stamp}{suffix}",
            log_data=fit(data, LOG_DATA_LIMIT, text),
            model_name=config.model,
            usage_id=config.usage_id,
        )

    def _key_masker(self, key: str) -> Masker:
        masker = self._key_maskers.get(key)
        if masker is None:
            masker = Masker({"api_key": key})
            self._key_maskers = {key: masker}  # the latest key only (a rotation replaces it)
        return masker


def log_record(
    config: LLMConfig,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    started: float,
    reply: Completion | None,
    error: dict[str, str] | None,
) -> dict[str, Any]:
    """One call as the OpenHands SDK logs it: messages, tools and `kwargs` (the parameters),
    then `response` (the provider's answer as litellm gave it) or `error`, with cost, latency
    and a usage summary."""
    params = config.model_dump(mode="json", include=set(PARAMETERS))
    data: dict[str, Any] = {
        "messages": _sealed(messages),
        "tools": tools,
        "kwargs": redact(params),
        "timestamp": time.time(),
        "latency_sec": time.time() - started,
    }
    if error is not None:
        data.update(error=error, cost=0.0)
        return data
    assert reply is not None
    data["response"] = _sealed(_response(reply))
    data["cost"] = reply.cost
    data["usage_summary"] = {
        "prompt_tokens": reply.usage.prompt_tokens,
        "completion_tokens": reply.usage.completion_tokens,
        "reasoning_tokens": reply.usage.reasoning_tokens,
        "cache_read_tokens": reply.usage.cache_read_tokens,
    }
    return data


def _sealed(value: Any) -> Any:
    """`value` with the Responses API's encrypted reasoning left out of the log (an opaque
    blob of the provider's, kept in the events to be sent back, never logged)."""
    if isinstance(value, dict):
        return {
            k: "[encrypted]" if k == "encrypted_content" and v is not None else _sealed(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_sealed(v) for v in value]
    return value


def _response(reply: Completion) -> Any:
    dump: Callable[..., Any] | None = getattr(reply.raw, "model_dump", None)
    if dump is not None:
        with warnings.catch_warnings():  # litellm's models warn about their own loose fields
            warnings.simplefilter("ignore")
            try:
                return dump(mode="json", exclude_none=True)
            except Exception:  # an odd provider object: the parsed form below still says it
                pass
    return {
        "id": reply.response_id,
        "content": reply.content,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls
        ],
        "reasoning_content": reply.reasoning_content,
        "usage": reply.usage.model_dump(mode="json"),
    }


def token_event(reply: Completion) -> TokenEvent | None:
    """The answer's TokenEvent: None when the server sent no ids, or too many to keep."""
    prompt, response = reply.prompt_token_ids, reply.response_token_ids
    if prompt is None or response is None:
        return None
    if len(prompt) > MAX_TOKEN_IDS or len(response) > MAX_TOKEN_IDS:
        logger.warning(
            "token ids of response %s not recorded: %d prompt and %d response ids "
            "(at most %d each are kept)",
            reply.response_id,
            len(prompt),
            len(response),
            MAX_TOKEN_IDS,
        )
        return None
    return TokenEvent(source="agent", prompt_token_ids=prompt, response_token_ids=response)


# -- bounding -----------------------------------------------------------------------------


def _dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, default=str, separators=(",", ":"))


def _escaped(text: str) -> str:
    return _dumps(text)[1:-1]


def _cut_strings(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}[... {len(value) - limit} characters cut]"
    if isinstance(value, dict):
        return {k: _cut_strings(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v, limit) for v in value]
    return value


def _tool_names(tools: Any) -> Any:
    if not isinstance(tools, list):
        return tools
    return [t.get("function", {}).get("name", "?") if isinstance(t, dict) else "?" for t in tools]


def _lengths(value: Any, out: list[int] | None = None) -> list[int]:
    """Lengths of the strings in JSON-like `value`."""
    out = [] if out is None else out
    if isinstance(value, str):
        out.append(len(value))
    elif isinstance(value, dict):
        for v in value.values():
            _lengths(v, out)
    elif isinstance(value, list):
        for v in value:
            _lengths(v, out)
    return out


#: Lengths long strings are cut to, in turn, until a log fits.
CUTS = (8192, 2048, 512)


def fit(data: dict[str, Any], limit: int, text: str | None = None) -> str:
    """`data` as JSON of at most `limit` characters (limit >= 4096), valid JSON still.

    Cut in steps until it fits, each named in `truncated.how`: tools by name only; every long
    string cut short (the cut marked in the string); then the first message (the system
    prompt) and as many of the latest as fit, the rest left out; at last only the summary
    fields. The response and the parameters are kept to the last step. `text`: `data`
    already encoded, when the caller has it.
    """
    text = _dumps(data) if text is None else text
    if len(text) <= limit:
        return text
    note: dict[str, Any] = {"original_chars": len(text), "limit_chars": limit}

    def noted(body: dict[str, Any], how: str) -> str:
        note["how"] = how
        return _dumps({**body, "truncated": note})

    slim = {**data, "tools": _tool_names(data.get("tools"))}
    how = "tools listed by name"
    text = noted(slim, how)
    if len(text) <= limit:
        return text
    lengths = _lengths(slim)
    excess = len(text) - limit
    for cap in CUTS:
        saved = sum(n - cap - 40 for n in lengths if n > cap)  # 40: the cut's own note
        if saved <= 0 or (saved < excess and cap != CUTS[-1]):
            continue  # this cut changes nothing, or could not be enough: try a shorter one
        slim = _cut_strings(slim, cap)
        how = f"tools listed by name; strings cut to {cap} characters"
        text = noted(slim, how)
        if len(text) <= limit:
            return text
    messages = slim.get("messages")
    if isinstance(messages, list) and len(messages) > 1:
        # The rest of the log without the messages, then the newest messages that fit.
        room = limit - len(noted({**slim, "messages": [messages[0]]}, how)) - 200
        sizes = [len(_dumps(m)) + 1 for m in messages]
        start = len(messages)  # messages[start:] are kept, with the first
        while start > 1 and room - sizes[start - 1] >= 0:
            start -= 1
            room -= sizes[start]
        text = noted(
            {**slim, "messages": [messages[0], *messages[start:]]},
            f"{how}; {start - 1} messages after the first left out",
        )
        if len(text) <= limit:
            return text
    note["how"] = "only the summary fields kept"
    summary = {
        k: data[k] for k in ("timestamp", "latency_sec", "cost", "usage_summary") if k in data
    }
    return _dumps(_cut_strings({**summary, "truncated": note}, 128))
