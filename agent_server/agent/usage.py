"""What a conversation's LLM calls cost: one response's token usage, and the running totals.

The shapes are the OpenHands SDK's (`TokenUsage`, `MetricsSnapshot`): clients read them from
ConversationInfo.metrics and from the `stats` state updates the loop sends after each response.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from events.usage import TokenUsage

__all__ = ["Metrics", "TokenUsage"]


class Metrics(BaseModel):
    """Totals of a conversation's LLM use (OpenHands' MetricsSnapshot shape)."""

    model_name: str = "default"
    accumulated_cost: float = 0.0
    max_budget_per_task: float | None = None
    accumulated_token_usage: TokenUsage = Field(default_factory=TokenUsage)
    response_count: int = 0
    total_latency: float = 0.0

    def add(self, usage: TokenUsage, cost: float, latency: float) -> None:
        """Count one response."""
        total = self.accumulated_token_usage
        self.model_name = usage.model or self.model_name
        self.accumulated_cost += cost
        self.response_count += 1
        self.total_latency += latency
        for name in (
            "prompt_tokens",
            "completion_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
        ):
            setattr(total, name, getattr(total, name) + getattr(usage, name))
        total.context_window = max(total.context_window, usage.context_window)  # as the SDK's
        total.per_turn_token = usage.per_turn_token
        total.response_id = usage.response_id
        total.model = usage.model
