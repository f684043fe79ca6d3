"""What a response through the gateway used: its tokens, read from the bytes as they pass, and
their price.

The bytes are read beside the client, never in its way: each chunk is handed on first and
looked at after (`Meter.feed` only copies and parses), so no chunk waits for the metering.

- A JSON answer (not streamed) is kept up to MAX_JSON bytes and read when it ends: `usage`
  with OpenAI's `prompt_tokens` / `completion_tokens`, or Anthropic's and OpenAI's Responses
  API's `input_tokens` / `output_tokens` (Anthropic's cache reads and writes are input too),
  or Gemini's `usageMetadata`.
- A stream (server-sent events) is read event by event: OpenAI's last chunk carries `usage`
  when the client asked for it (`stream_options.include_usage`, as the agent does); Anthropic's
  `message_start` has the input and `message_delta` the output so far; the Responses API's
  `response.completed` carries the whole response with its usage. Only `data:` lines that
  mention usage are parsed.

Prices come from litellm's own map (`litellm.cost_per_token`, the model as the answer names it,
else as the request did); a model litellm cannot price costs 0, and is counted all the same.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from control_plane.llm import _litellm

logger = logging.getLogger(__name__)

#: Bytes of a JSON answer kept to read its usage (a bigger one is passed on, not counted).
MAX_JSON = 8 * 1024 * 1024
#: The longest SSE line kept while waiting for its end (a longer one is skipped).
MAX_LINE = 1024 * 1024


@dataclass
class Usage:
    prompt_tokens: int = 0
    """Every input token, cached ones included (litellm's convention)."""
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    model: str | None = None
    """The model as the answer names it (None: it did not)."""


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def read_usage(data: Any, usage: Usage) -> None:
    """Fold the usage one JSON object reports (an answer, or one streamed event) into `usage`.
    Streams report totals so far, so each number found replaces the one before."""
    if not isinstance(data, dict):
        return
    if isinstance(data.get("model"), str):
        usage.model = data["model"]
    if data.get("type") == "message_start" and isinstance(data.get("message"), dict):
        read_usage(data["message"], usage)  # Anthropic's first event: the message so far
        return
    if str(data.get("type", "")).startswith("response.") and isinstance(data.get("response"), dict):
        read_usage(data["response"], usage)  # OpenAI's Responses API: the response so far
        return
    found = data.get("usage")
    if isinstance(found, dict):
        if "input_tokens" in found or "output_tokens" in found:  # Anthropic's
            read, write = (
                _int(found.get("cache_read_input_tokens")),
                _int(found.get("cache_creation_input_tokens")),
            )
            if "input_tokens" in found:
                usage.prompt_tokens = _int(found["input_tokens"]) + read + write
                usage.cache_read_tokens, usage.cache_write_tokens = read, write
            if "output_tokens" in found:
                usage.completion_tokens = _int(found["output_tokens"])
            details = found.get("input_tokens_details")
            if isinstance(details, dict):  # OpenAI's Responses API: input counts its cached
                usage.cache_read_tokens = _int(details.get("cached_tokens"))
        else:  # OpenAI's
            usage.prompt_tokens = _int(found.get("prompt_tokens")) or usage.prompt_tokens
            usage.completion_tokens = (
                _int(found.get("completion_tokens")) or usage.completion_tokens
            )
            details = found.get("prompt_tokens_details")
            if isinstance(details, dict):
                usage.cache_read_tokens = _int(details.get("cached_tokens"))
    gemini = data.get("usageMetadata")
    if isinstance(gemini, dict):
        usage.prompt_tokens = _int(gemini.get("promptTokenCount"))
        usage.completion_tokens = _int(gemini.get("candidatesTokenCount")) + _int(
            gemini.get("thoughtsTokenCount")
        )


class Meter:
    """Reads the usage of one response from its chunks (`feed`), streamed or not."""

    def __init__(self, content_type: str) -> None:
        self.streaming = content_type.split(";")[0].strip().lower() == "text/event-stream"
        self.usage = Usage()
        self._kept = bytearray()
        self._overflow = False

    def feed(self, chunk: bytes) -> None:
        if self._overflow:
            return
        self._kept += chunk
        if not self.streaming:
            if len(self._kept) > MAX_JSON:
                self._overflow, self._kept = True, bytearray()
            return
        *lines, rest = bytes(self._kept).split(b"\n")
        self._kept = bytearray(rest if len(rest) <= MAX_LINE else b"")
        for line in lines:
            self._line(line)

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:") or b"sage" not in line:  # usage, usageMetadata
            return
        try:
            read_usage(json.loads(line[5:]), self.usage)
        except ValueError:
            pass  # not JSON ([DONE], or a line cut by a broken stream)

    def finish(self) -> Usage:
        """The usage once the response has ended (or broke off: what was seen so far)."""
        if self.streaming:
            self._line(bytes(self._kept).rstrip(b"\r"))
        elif self._kept and not self._overflow:
            try:
                read_usage(json.loads(bytes(self._kept)), self.usage)
            except ValueError:
                pass  # an error page, not JSON
        self._kept = bytearray()
        return self.usage


def cost(usage: Usage, model: str | None, provider: str | None) -> float:
    """The USD price of `usage` by litellm's price map; 0 for a model it cannot price.
    Blocking (litellm is imported on first use)."""
    name = usage.model or model
    if not name or not (usage.prompt_tokens or usage.completion_tokens):
        return 0.0
    litellm = _litellm()
    tried: list[tuple[str, str | None]] = [(name, provider)]
    if model and model != name:
        tried.append((model, provider))
    for candidate, by in tried:
        try:
            prompt, completion = litellm.cost_per_token(
                model=candidate,
                custom_llm_provider=by,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                cache_read_input_tokens=usage.cache_read_tokens,
                cache_creation_input_tokens=usage.cache_write_tokens,
            )
            return float(prompt) + float(completion)
        except Exception:  # not in the price map: the next name, else free
            continue
    logger.debug("litellm cannot price %s (%s): counted at 0", name, provider)
    return 0.0
