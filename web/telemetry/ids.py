"""Spans that are identities only: tracing on without an exporter.

Recorded spans that nothing exports are work for nobody: the SDK builds each one (attributes,
times, a lock) to drop it at its end, three times a step (issue 30.9). What tracing `on`
promises without an exporter is trace ids: in the JSON logs, on a conversation (`trace_id`),
and in its meta.json, so that a later process with an exporter continues the same trace. These
spans give exactly that: each has a context of its own (the parent's trace or a new one, a new
span id, the sampling decision of the configured sampler, as the SDK would take it) and records
nothing.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision, Sampler
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags
from opentelemetry.util.types import Attributes


class IdsTracer(trace.NoOpTracer):
    """Non-recording spans with ids of their own (the API's no-op tracer hands back the
    parent's span instead, or no span at all)."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self.ids = RandomIdGenerator()

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> Span:
        parent = trace.get_current_span(context).get_span_context()
        trace_id = parent.trace_id if parent.is_valid else self.ids.generate_trace_id()
        sampled = self.sampler.should_sample(context, trace_id, name, kind, attributes, links)
        flags = TraceFlags(
            TraceFlags.SAMPLED
            if sampled.decision is Decision.RECORD_AND_SAMPLE
            else TraceFlags.DEFAULT
        )
        return NonRecordingSpan(
            SpanContext(
                trace_id,
                self.ids.generate_span_id(),
                is_remote=False,
                trace_flags=flags,
                trace_state=sampled.trace_state,
            )
        )


class IdsTracerProvider(trace.TracerProvider):
    """The provider of `IdsTracer`: one tracer whatever the scope."""

    def __init__(self, sampler: Sampler) -> None:
        self.tracer = IdsTracer(sampler)

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return self.tracer


__all__ = ["IdsTracer", "IdsTracerProvider"]
