"""Telemetry: traces, metrics and the correlation fields of logs, built once per app.

`Telemetry.build` is called by the composition root with what the configuration says
(`Config.tracing_enabled`, `Config.otlp_traces_endpoint`, `Config.traces_sampler[_arg]`);
everything else receives the object (or the narrow `AgentTelemetry` of one conversation's
agent) and never reaches for a global. The agent loop calls two things only: `step()` around a
step, `tool_call()` around a tool call; LLM calls are measured by
`agent_server.agent.traced.TracedModel`, which wraps the Model.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import SpanKind

from agent_server.telemetry.metrics import ServerMetrics
from agent_server.telemetry.tracing import (
    LLMCall,
    Mask,
    Tracing,
    failed,
    llm_call_context,
)
from web.telemetry import tracer_provider

#: service.name of the spans, unless OTEL_SERVICE_NAME says otherwise.
SERVICE = "agent-server"


class Telemetry:
    """The app's tracer and metrics."""

    def __init__(self, tracing: Tracing, metrics: ServerMetrics) -> None:
        self.tracing = tracing
        self.metrics = metrics

    @classmethod
    def build(
        cls,
        tracing: bool = False,
        endpoint: str | None = None,
        sampler: str = "parentbased_always_on",
        ratio: float = 1.0,
    ) -> Telemetry:
        """`tracing`: spans have ids (else the no-op provider: only a caller's trace is kept);
        `endpoint`: the OTLP/HTTP traces URL spans are recorded for and exported to (None:
        ids only, `IdsTracer`); `sampler` and `ratio`: OTEL_TRACES_SAMPLER[_ARG]'s values."""
        provider = tracer_provider(tracing, endpoint, (sampler, ratio), SERVICE)
        return cls(Tracing(provider, recording=tracing and endpoint is not None), ServerMetrics())

    def shutdown(self) -> None:
        self.tracing.shutdown()

    def agent(self, mask: Mask) -> AgentTelemetry:
        """What one conversation's agent loop reports through (`mask`: its secret masker)."""
        return AgentTelemetry(self, mask)

    @contextlib.contextmanager
    def llm_call(self, model: str) -> Iterator[LLMCallRecord]:
        """An LLM call's span (`chat <model>`, GenAI attributes) and metrics."""
        started = time.perf_counter()
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
        record = LLMCallRecord()
        outcome = "error"
        with self.tracing.inner(
            f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes
        ) as span:
            call = LLMCall(span)
            try:
                with llm_call_context(call):
                    yield record
                outcome = "ok"
            except BaseException as exc:
                outcome = "cancelled" if type(exc).__name__ == "CancelledError" else "error"
                code = getattr(exc, "code", None)  # LLMFailure names the error class
                if span.is_recording() and isinstance(code, str):
                    failed(span, code)
                raise
            finally:
                if span.is_recording():  # one call: the SDK takes its lock once
                    ending: dict[str, Any] = {"agent_server.llm.retries": call.retries}
                    if call.provider:
                        ending["gen_ai.system"] = ending["gen_ai.provider.name"] = call.provider
                    if outcome == "ok":
                        ending.update(
                            {
                                "gen_ai.response.id": record.response_id[:200],
                                "gen_ai.usage.input_tokens": record.input_tokens,
                                "gen_ai.usage.output_tokens": record.output_tokens,
                                "agent_server.llm.cost_usd": record.cost,
                                "agent_server.llm.latency_s": record.latency,
                            }
                        )
                    span.set_attributes(ending)
                self.metrics.llm_call(
                    model,
                    outcome,
                    time.perf_counter() - started,
                    call.retries,
                    record.input_tokens,
                    record.output_tokens,
                    record.cost,
                )


@dataclass
class LLMCallRecord:
    """Filled in by the caller once the response is in."""

    response_id: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    latency: float = 0.0


@dataclass
class ToolCallRecord:
    """The caller says how the call went: ok, error (the tool failed or said it failed),
    rejected (a hook or the user refused it), invalid (bad arguments, unknown tool), skipped
    (after finish)."""

    outcome: str = "ok"


class AgentTelemetry:
    """One conversation's agent: its steps and tool calls."""

    def __init__(self, telemetry: Telemetry, mask: Mask) -> None:
        self.telemetry = telemetry
        self.mask = mask

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        self.telemetry.metrics.steps.inc()
        # A step that ends the run raises its status (finished, paused...): no failure.
        with self.telemetry.tracing.inner("step", fail_on_exception=False):
            yield

    @contextlib.contextmanager
    def tool_call(self, tool: str, call_id: str) -> Iterator[ToolCallRecord]:
        """`tool`: a name the agent has ("unknown" for any other: a model's invention is no
        label); `call_id` is masked before it becomes an attribute."""
        record = ToolCallRecord()
        started = time.perf_counter()
        tracing = self.telemetry.tracing
        attributes = None
        if tracing.recording:  # else no span, and no masking for it
            attributes = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": self.mask(call_id)[:200],
            }
        with tracing.inner(f"execute_tool {tool}", attributes=attributes) as span:
            try:
                yield record
            except BaseException as exc:
                record.outcome = "cancelled" if type(exc).__name__ == "CancelledError" else "error"
                raise
            finally:
                if span.is_recording():
                    span.set_attribute("agent_server.tool.outcome", record.outcome)
                    if record.outcome not in ("ok", "cancelled"):
                        failed(span, record.outcome)
                self.telemetry.metrics.tool_call(
                    tool, record.outcome, time.perf_counter() - started
                )


__all__ = ["AgentTelemetry", "LLMCallRecord", "Telemetry", "ToolCallRecord"]
