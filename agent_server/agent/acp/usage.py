"""What an ACP agent reports of its model use, counted in the conversation's metrics.

The agent keeps its own model, so its own figures are all there is: a turn's token usage
(`PromptResponse.usage`, marked unstable in the protocol) and the session's cumulative cost
and context window (`usage_update` notifications). A turn that reports usage is one response
in the metrics (ConversationInfo.metrics, `stats`) and a `stats` state update in the shape
the loop sends; cost counts only in USD (the metrics have no currency), as what the session's
cumulative cost grew by since the last report. An agent that reports nothing leaves them at 0.
A side question (ask_agent) counts too, without an event (as our own agent's does): its turn's
tokens, and what its session's cost grew to (a fork's from the conversation's session's).
"""

from __future__ import annotations

from acp.schema import PromptResponse, UsageUpdate

from agent_server.agent.usage import Metrics, TokenUsage
from events import ConversationStateUpdateEvent


def usd(update: UsageUpdate) -> float | None:
    """The session's cumulative cost a usage update reports, when it is in USD."""
    if update.cost is not None and update.cost.currency.upper() == "USD":
        return update.cost.amount
    return None


class ACPUsage:
    def __init__(self, metrics: Metrics, model: str, usage_id: str) -> None:
        self.metrics = metrics
        self.model = model
        self.usage_id = usage_id
        #: The session's cumulative cost last reported (`restart` sets it for each session).
        self._cost_seen = 0.0
        self._cost_pending = 0.0
        self._context_window = 0

    @property
    def cost_seen(self) -> float:
        return self._cost_seen

    def restart(self, cost_seen: float) -> None:
        """A session opened: a new one counts its cost from 0, a resumed one from what was
        counted of it already."""
        self._cost_seen = cost_seen

    def update(self, update: UsageUpdate) -> None:
        self._context_window = update.size
        if (cost := usd(update)) is not None:
            self._cost_pending += max(cost - self._cost_seen, 0.0)
            self._cost_seen = cost

    def turn(self, response: PromptResponse, latency: float) -> list[ConversationStateUpdateEvent]:
        """The turn's figures counted; the `stats` update (none when it reported nothing)."""
        if response.usage is None and not self._cost_pending:
            return []
        usage = self._tokens(response)
        cost, self._cost_pending = self._cost_pending, 0.0
        self.metrics.add(usage, cost, latency)
        return [
            ConversationStateUpdateEvent(
                key="stats",
                value={
                    "usage_to_metrics": {self.usage_id: self.metrics.model_dump(mode="json")},
                    "last_response": {
                        **usage.model_dump(mode="json"),
                        "cost": cost,
                        "latency": latency,
                    },
                },
            )
        ]

    def side(self, response: PromptResponse, cost: float, latency: float) -> None:
        """A side question's figures: `cost`, its session's cumulative cost (USD) at the end."""
        if response.usage is not None or cost > 0:
            self.metrics.add(self._tokens(response), cost, latency)

    def _tokens(self, response: PromptResponse) -> TokenUsage:
        usage = TokenUsage(model=self.model, context_window=self._context_window)
        if (used := response.usage) is not None:
            usage.prompt_tokens, usage.completion_tokens = used.input_tokens, used.output_tokens
            usage.cache_read_tokens = used.cached_read_tokens or 0
            usage.cache_write_tokens = used.cached_write_tokens or 0
            usage.reasoning_tokens = used.thought_tokens or 0
            usage.per_turn_token = used.total_tokens
        return usage
