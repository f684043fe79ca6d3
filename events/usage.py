"""The OpenHands SDK's `TokenUsage`: one LLM response's tokens, or their running totals. Both
services show it (the agent server in its metrics and `stats` updates, the control plane in its
records' `metrics`), so it is part of the schema they share."""

from __future__ import annotations

from pydantic import BaseModel


class TokenUsage(BaseModel):
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    context_window: int = 0
    per_turn_token: int = 0
    response_id: str = ""
