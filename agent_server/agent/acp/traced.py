"""ACP tool calls in the traces and metrics, as the loop's are: each call an `execute_tool
<kind>` span (gen_ai attributes, its outcome) from the update that starts it to the one that
finishes it, under the run's span; each finished call counted in `tool_calls_total` (the
label is the call's ACP kind, a closed set) and each turn in `steps_total`.

A call's updates arrive on the connection's task, not the run's, so the run's context is taken
when the prompt is sent and the spans are started and ended by hand under it.
"""

from __future__ import annotations

import time

from opentelemetry import context as otel_context
from opentelemetry.trace import Span

from agent_server.agent.acp.calls import MAX_CALLS, ToolCallState
from agent_server.telemetry import Telemetry
from agent_server.telemetry.tracing import Mask, failed

#: The ACP tool kinds (anything else is `other`): metric labels stay bounded.
KINDS = frozenset(
    {
        "read",
        "edit",
        "delete",
        "move",
        "search",
        "execute",
        "think",
        "fetch",
        "switch_mode",
        "other",
    }
)


class CallTelemetry:
    def __init__(self, telemetry: Telemetry | None, mask: Mask) -> None:
        self.telemetry = telemetry
        self.mask = mask
        self._parent = otel_context.Context()
        self._open: dict[str, tuple[Span | None, float, str]] = {}

    def turn(self) -> None:
        """A prompt is sent (in the run's task): its calls hang off the run's span."""
        self._parent = otel_context.get_current()
        if self.telemetry is not None:
            self.telemetry.metrics.steps.inc()

    def seen(self, call: ToolCallState) -> None:
        """After an update: a call seen for the first time starts, a finished one ends."""
        if self.telemetry is None:
            return
        if (
            call.tool_call_id not in self._open
            and not call.finished
            and len(self._open) < MAX_CALLS
        ):
            kind = call.tool_kind if call.tool_kind in KINDS else "other"
            span = None
            if self.telemetry.tracing.recording:
                span = self.telemetry.tracing.tracer.start_span(
                    f"execute_tool {kind}",
                    context=self._parent,
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": kind,
                        "gen_ai.tool.call.id": self.mask(call.tool_call_id)[:200],
                    },
                )
            self._open[call.tool_call_id] = (span, time.perf_counter(), kind)
        elif call.finished:
            self._end(call.tool_call_id, "ok" if call.status == "completed" else "error")

    def end_all(self, outcome: str) -> None:
        """The turn ended (or failed, or was interrupted): calls still open end with it."""
        for call_id in list(self._open):
            self._end(call_id, outcome)

    def _end(self, call_id: str, outcome: str) -> None:
        opened = self._open.pop(call_id, None)
        if opened is None or self.telemetry is None:
            return
        span, started, kind = opened
        if span is not None:
            span.set_attribute("agent_server.tool.outcome", outcome)
            if outcome not in ("ok", "cancelled"):
                failed(span, outcome)
            span.end()
        self.telemetry.metrics.tool_call(kind, outcome, time.perf_counter() - started)
