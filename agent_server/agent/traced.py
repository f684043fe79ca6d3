"""TracedModel: every LLM call measured, whoever makes it.

The composition root wraps the Model once, so the loop's calls, the condenser's, `ask_agent`'s
and the tools' (advisor, vision, sleeptime) all get a `chat <model>` span with the GenAI
semantic-convention attributes (tokens, cost, latency, retries) and the LLM metrics, without
any of them knowing about telemetry.
"""

from __future__ import annotations

from typing import Any

from agent_server.agent.llm import Completion
from agent_server.agent.model import Model, OnDelta, WrappedModel
from agent_server.agent.spec import LLMConfig
from agent_server.telemetry import Telemetry


class TracedModel(WrappedModel):
    """A Model that reports each call to the app's telemetry, then answers as `model` does."""

    def __init__(self, model: Model, telemetry: Telemetry) -> None:
        super().__init__(model)
        self.telemetry = telemetry

    async def complete(
        self,
        config: LLMConfig,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_delta: OnDelta | None = None,
    ) -> Completion:
        with self.telemetry.llm_call(config.model) as record:
            reply = await self.model.complete(config, messages, tools, on_delta)
            record.response_id = reply.response_id
            record.input_tokens = reply.usage.prompt_tokens
            record.output_tokens = reply.usage.completion_tokens
            record.cost, record.latency = reply.cost, reply.latency
            return reply
