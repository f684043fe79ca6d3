"""The control plane's telemetry: its metrics and its spans, built once per app.

`Telemetry.build(config)` is called by the composition root; every service that reports gets
the object and never reaches for a global (several control planes may share a process, as the
tests' do). The trees of spans:

    POST /api/v1/app-conversations          the start request (`telemetry.http.Observe`)
      start_task                             its job: every stage below it, READY or ERROR
        start_task.stage <STAGE>             one per stage, as stored
          sandbox.<call>                     each call on the provider (create, resume...)
          agent_server.<call>                each call on the sandbox's agent server, with the
                                             W3C `traceparent` it continues: the conversation's
                                             spans, its runs and model calls, join this trace
    POST /api/v1/webhooks/events/{id}        a batch: `webhook.batch` with its event count
    POST /api/v1/llm/{path}                  a gateway call: `llm_gateway.forward`

A start taken over after a restart is a trace of its own. Nothing a user wrote becomes an
attribute (no message, no key, no URL with a query); exceptions are recorded by type only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from control_plane.telemetry.metrics import PlaneMetrics
from web.telemetry import tracer_provider

#: service.name of the spans, unless OTEL_SERVICE_NAME says otherwise.
SERVICE = "control-plane"
#: A span of a call out (a provider's, another service's).
CLIENT = SpanKind.CLIENT


class Telemetry:
    """The control plane's tracer and metrics."""

    def __init__(self, provider: trace.TracerProvider, metrics: PlaneMetrics) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("control_plane")
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
        `endpoint`: the OTLP/HTTP traces URL spans are recorded for and exported to."""
        return cls(tracer_provider(tracing, endpoint, (sampler, ratio), SERVICE), PlaneMetrics())

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        attributes: Mapping[str, Any] | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        root: bool = False,
    ) -> Iterator[Span]:
        """A span under the current one (`root`: a trace of its own); an exception ends it
        failed, named by its type only (its text may quote a secret)."""
        context = trace.set_span_in_context(trace.INVALID_SPAN) if root else None
        with self.tracer.start_as_current_span(
            name,
            context=context,
            kind=kind,
            attributes=dict(attributes or {}),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as exc:
                if span.is_recording() and not isinstance(exc, GeneratorExit):
                    failed(span, type(exc).__name__)
                raise

    def shutdown(self) -> None:
        """Spans still batched are sent (the SDK's provider; the others have nothing)."""
        shutdown = getattr(self.provider, "shutdown", None)
        if callable(shutdown):
            shutdown()


def annotate(attributes: Mapping[str, Any]) -> None:
    """Attributes on the current span (a request's: a webhook batch's size, the model a gateway
    call named); nothing when it records nothing."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(dict(attributes))


def failed(span: Span, what: str) -> None:
    span.set_status(Status(StatusCode.ERROR, what))
    span.set_attribute("error.type", what)


__all__ = ["CLIENT", "SERVICE", "Telemetry", "annotate", "failed"]
