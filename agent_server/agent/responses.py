"""OpenAI's Responses API: the shape of one call, for the models that take it.

The agent keeps its history as chat-completions messages (`view.py`); for the models the
OpenHands SDK sends through the Responses API (`uses_responses_api`), this turns them into the
API's input items and its output back into a `Completion`. Calls are stateless (`store`
false): the server keeps nothing, so each turn sends the whole history, and the model's
reasoning comes back encrypted (`include: ["reasoning.encrypted_content"]`) to be sent again,
unchanged, before the answer it led to. That reasoning item rides on the assistant message
(`responses_reasoning_item`, as the events store it); its summary is the step's
`reasoning_content`, which the events show.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agent_server.agent.spec import LLMConfig

#: The OpenHands SDK's rule (`RESPONSES_API_MODELS`): a case-insensitive part of the name.
RESPONSES_MODELS = ("gpt-5", "gpt-6", "codex-mini-latest")
#: The assistant message's key for the reasoning item it followed (the view sets it).
REASONING_ITEM = "responses_reasoning_item"


def uses_responses_api(config: LLMConfig) -> bool:
    """`api_mode` when set; otherwise the SDK's rule on the model's name."""
    if config.api_mode != "auto":
        return config.api_mode == "responses"
    name = config.model.lower()
    return any(part in name for part in RESPONSES_MODELS)


def request(
    config: LLMConfig, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> dict[str, Any]:
    """litellm.aresponses' arguments for one call (the key and base URL added by the caller)."""
    instructions, items = _items(messages)
    kwargs: dict[str, Any] = {
        "model": config.model,
        "input": items,
        "store": False,
        "num_retries": 0,
    }
    if instructions:
        kwargs["instructions"] = instructions
    if tools:
        kwargs["tools"] = [_tool(t) for t in tools]
        kwargs["tool_choice"] = "auto"
    if config.enable_encrypted_reasoning:
        kwargs["include"] = ["reasoning.encrypted_content"]
    if config.reasoning_effort is not None:
        kwargs["reasoning"] = {"effort": config.reasoning_effort}
        if config.reasoning_summary is not None:
            kwargs["reasoning"]["summary"] = config.reasoning_summary
    if config.temperature is not None:
        kwargs["temperature"] = config.temperature
    if config.max_output_tokens is not None:
        kwargs["max_output_tokens"] = config.max_output_tokens
    if config.timeout is not None:
        kwargs["timeout"] = config.timeout
    if config.litellm_extra_body:
        kwargs["extra_body"] = dict(config.litellm_extra_body)
    return kwargs


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A chat-completions function tool as the Responses API names its parts."""
    function = tool.get("function", tool)
    out = {
        "type": "function",
        "name": function["name"],
        "parameters": function.get("parameters", {"type": "object", "properties": {}}),
    }
    if function.get("description"):
        out["description"] = function["description"]
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(c.get("text", ""))
            for c in content
            if isinstance(c, dict) and c.get("type") == "text"
        )
    return ""


def _user_content(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    parts: list[dict[str, Any]] = []
    for c in content or []:
        if not isinstance(c, dict):
            continue
        if c.get("type") == "text":
            parts.append({"type": "input_text", "text": str(c.get("text", ""))})
        elif c.get("type") == "image_url":
            url = c.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            parts.append({"type": "input_image", "image_url": str(url), "detail": "auto"})
    return parts


def _items(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(instructions from the system messages, the input items of the rest)."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            instructions.append(_text(message.get("content")))
        elif role == "user":
            items.append(
                {
                    "type": "message",
                    "role": "user",
                    "content": _user_content(message.get("content")),
                }
            )
        elif role == "assistant":
            reasoning = message.get(REASONING_ITEM)
            if isinstance(reasoning, dict) and reasoning.get("id"):
                items.append(_reasoning_input(reasoning))
            text = _text(message.get("content"))
            if text:
                items.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text}],
                    }
                )
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": function.get("name", ""),
                        "arguments": function.get("arguments") or "{}",
                    }
                )
        elif role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": _text(message.get("content")),
                }
            )
    return "\n\n".join(i for i in instructions if i), items


def _reasoning_input(item: dict[str, Any]) -> dict[str, Any]:
    """A stored reasoning item as the API takes it back: as it came, summary and all."""
    out: dict[str, Any] = {
        "type": "reasoning",
        "id": item["id"],
        "summary": [{"type": "summary_text", "text": s} for s in item.get("summary") or []],
    }
    if item.get("content"):
        out["content"] = [{"type": "reasoning_text", "text": t} for t in item["content"]]
    if item.get("encrypted_content") is not None:
        out["encrypted_content"] = item["encrypted_content"]
    return out


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def reasoning_item(response: Any) -> dict[str, Any] | None:
    """The response's reasoning item, as `ReasoningItemModel` holds it, or None."""
    for item in _get(response, "output") or []:
        if _get(item, "type") != "reasoning":
            continue
        content = _get(item, "content")
        return {
            "id": _get(item, "id"),
            "summary": [str(_get(s, "text", "")) for s in _get(item, "summary") or []],
            "content": None if content is None else [str(_get(c, "text", "")) for c in content],
            "encrypted_content": _get(item, "encrypted_content"),
            "status": _get(item, "status"),
        }
    return None


def parts(response: Any) -> tuple[str, list[tuple[str, str, str, str | None]]]:
    """(the text of its messages, its function calls as (call id, name, arguments, item id))."""
    texts: list[str] = []
    calls: list[tuple[str, str, str, str | None]] = []
    for item in _get(response, "output") or []:
        kind = _get(item, "type")
        if kind == "message":
            texts.extend(
                str(_get(c, "text", ""))
                for c in _get(item, "content") or []
                if _get(c, "type") == "output_text"
            )
        elif kind == "function_call":
            arguments = _get(item, "arguments") or "{}"
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)
            calls.append(
                (
                    str(_get(item, "call_id") or _get(item, "id") or ""),
                    str(_get(item, "name") or ""),
                    arguments,
                    _get(item, "id"),
                )
            )
    return "".join(texts), calls


def usage_figures(response: Any) -> dict[str, int]:
    """prompt, completion, cached and reasoning tokens of the response's usage."""
    usage = _get(response, "usage")

    def num(obj: Any, name: str) -> int:
        value = _get(obj, name) if obj is not None else None
        return int(value) if isinstance(value, (int, float)) else 0

    return {
        "prompt": num(usage, "input_tokens"),
        "completion": num(usage, "output_tokens"),
        "cached": num(_get(usage, "input_tokens_details"), "cached_tokens"),
        "reasoning": num(_get(usage, "output_tokens_details"), "reasoning_tokens"),
    }


async def stream(
    litellm: Any, kwargs: dict[str, Any], on_delta: Callable[[str | None, str | None], None] | None
) -> Any:
    """A streamed call: each piece of text and of the reasoning summary told as it comes;
    the completed response (its last event carries it whole) returned."""
    events = await litellm.aresponses(**kwargs, stream=True)
    completed = None
    async for event in events:
        kind = _get(event, "type", "")
        kind = str(getattr(kind, "value", kind))  # litellm's enum of event types, or a str
        if kind == "response.output_text.delta" and on_delta is not None:
            on_delta(str(_get(event, "delta", "")), None)
        elif kind == "response.reasoning_summary_text.delta" and on_delta is not None:
            on_delta(None, str(_get(event, "delta", "")))
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            completed = _get(event, "response")
    if completed is None:
        raise RuntimeError("the response stream ended without its response")
    return completed
