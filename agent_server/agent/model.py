"""Model: the one seam between the agent and a language model.

The loop, the condenser and the session ask a `Model` for completions and never import
litellm themselves. `LiteLLMModel` is what the server runs (and what the end-to-end tests
drive against a scripted HTTP server); `ScriptedModel` answers from a list, in-process, so the
loop's unit tests need neither litellm nor a socket (mini-swe-agent ships the same idea).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent_server.agent import litellm_setup, llm
from agent_server.agent.llm import Completion, LLMFailure, ToolCall
from agent_server.agent.spec import LLMConfig
from agent_server.agent.usage import TokenUsage

#: Called with each streamed piece of text and of reasoning (either may be None).
OnDelta = Callable[[str | None, str | None], None]


class Model(Protocol):
    """What the agent needs of a language model."""

    async def complete(
        self,
        config: LLMConfig,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_delta: OnDelta | None = None,
    ) -> Completion:
        """One response; raises LLMFailure when the call failed for good."""
        ...

    async def supports_vision(self, config: LLMConfig) -> bool:
        """Whether the model reads images (config.vision, when set, decides)."""
        ...

    async def context_window(self, config: LLMConfig) -> int | None:
        """Input tokens the model takes at most, when known."""
        ...

    def prewarm(self) -> None:
        """Start loading what the first call needs, without waiting for it."""
        ...


class WrappedModel:
    """A Model around another: `complete` is the wrapper's own (what it adds to each call),
    everything else is the inner model's. Telemetry and completion logs wrap this way."""

    def __init__(self, model: Model) -> None:
        self.model = model

    async def complete(
        self,
        config: LLMConfig,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_delta: OnDelta | None = None,
    ) -> Completion:
        return await self.model.complete(config, messages, tools, on_delta)

    async def supports_vision(self, config: LLMConfig) -> bool:
        return await self.model.supports_vision(config)

    async def context_window(self, config: LLMConfig) -> int | None:
        return await self.model.context_window(config)

    def prewarm(self) -> None:
        self.model.prewarm()


class LiteLLMModel:
    """The production model: litellm, loaded lazily in a thread (agent_server.agent.llm)."""

    async def complete(
        self,
        config: LLMConfig,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_delta: OnDelta | None = None,
    ) -> Completion:
        return await llm.complete(config, messages, tools, on_delta=on_delta)

    async def supports_vision(self, config: LLMConfig) -> bool:
        if config.vision is not None:
            return config.vision
        litellm = await litellm_setup.load()
        try:
            return bool(litellm.supports_vision(model=config.model))
        except Exception:  # a model missing from litellm's map: assume text only
            return False

    async def context_window(self, config: LLMConfig) -> int | None:
        litellm = await litellm_setup.load()
        try:
            info = litellm.get_model_info(config.model)
        except Exception:  # a model missing from litellm's map: no window known
            return None
        window = info.get("max_input_tokens") or info.get("max_tokens")
        return int(window) if window else None

    def prewarm(self) -> None:
        litellm_setup.prewarm()


@dataclass
class Scripted:
    """One scripted answer: text, tool calls (name, JSON arguments), or a failure."""

    content: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)
    fail: str | None = None
    #: Seconds to wait before answering (an interrupt cancels the wait).
    delay: float = 0.0
    deltas: list[str] = field(default_factory=list)


class ScriptedModel:
    """Answers from a list, in order, in-process; records each request it was given.

    When the script runs out it answers "done" as plain text, which finishes a run.
    """

    def __init__(
        self, script: Iterable[Scripted] = (), *, vision: bool = False, window: int | None = None
    ) -> None:
        self.script = list(script)
        self.requests: list[list[dict[str, Any]]] = []
        #: The LLM configuration of each request (which model, after a switch, say).
        self.configs: list[LLMConfig] = []
        self.vision = vision
        self.window = window
        #: Set whenever a request arrives (tests wait on it instead of sleeping).
        self.asked = asyncio.Event()

    async def complete(
        self,
        config: LLMConfig,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_delta: OnDelta | None = None,
    ) -> Completion:
        self.requests.append(messages)
        self.configs.append(config)
        self.asked.set()
        answer = self.script.pop(0) if self.script else Scripted(content="done")
        if answer.delay:
            await asyncio.sleep(answer.delay)
        if answer.fail is not None:
            raise LLMFailure(answer.fail, f"scripted failure {answer.fail}")
        if on_delta is not None:
            for piece in answer.deltas:
                on_delta(piece, None)
        n = len(self.requests)
        return Completion(
            response_id=f"scripted-{n}",
            content=answer.content,
            tool_calls=[
                ToolCall(id=f"call-{n}-{i}", name=name, arguments=args)
                for i, (name, args) in enumerate(answer.calls)
            ],
            reasoning_content=None,
            thinking_blocks=[],
            usage=TokenUsage(
                model=config.model,
                prompt_tokens=10,
                completion_tokens=5,
                per_turn_token=15,
                response_id=f"scripted-{n}",
            ),
            cost=0.0,
            latency=0.0,
        )

    async def supports_vision(self, config: LLMConfig) -> bool:
        return config.vision if config.vision is not None else self.vision

    async def context_window(self, config: LLMConfig) -> int | None:
        return self.window

    def prewarm(self) -> None:
        pass
