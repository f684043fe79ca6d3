"""Traces (OpenTelemetry): where a conversation's spans hang and what they carry.

The tree of one conversation:

    conversation                      root: gen_ai.conversation.id, tags, metadata.<key>
      <observability_span_name>       when the creation request named one
        invoke_agent                  one per run: its final status
          step                        one per agent step
            chat <model>              one per LLM call: GenAI attributes, tokens, cost, retries
            execute_tool <tool>       one per tool call: its outcome

HTTP requests have spans of their own (agent_server.telemetry.http); a request's W3C
`traceparent` is continued, and a conversation created by a request that carried one joins
the caller's trace. A conversation's root (and named) span lives as long as the conversation
does in this process: it ends when the conversation is deleted or the server stops (and is
flushed then). Its identity is kept in meta.json (`TraceRef`), so after a restart later runs
still hang off it: one trace per conversation. A fork starts a trace of its own whose root
span links to its source's root (and names the source): the two traces are one click apart.

Spans are recorded only when they are exported. Tracing off is OpenTelemetry's no-op
provider: spans cost a context switch and carry the caller's trace id, nothing more. Tracing
on without an exporter gives spans ids and nothing else (`web.telemetry.ids`): trace
ids in logs and on conversations. In both, the spans inside a run (steps, LLM and tool calls)
are not made at all: they would only repeat the run's context, at a cost per step. Nothing from a
message, a command or a tool's output becomes an attribute; what comes from the client (span name,
tags, metadata) and the few model-made strings kept (a tool call id) pass the conversation's secret
masker first; exceptions are recorded by their type only (their text may quote a secret).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from pydantic import BaseModel, Field

logger = logging.getLogger(__name__)

#: Instrumentation scope of every span of the server.
SCOPE = "agent_server"
#: A conversation's secret masker (text in, text with its secrets hidden out).
Mask = Callable[[str], str]
#: Longest text attribute we set from client or model text (after masking).
MAX_TEXT = 1000

#: Set by the HTTP middleware for the length of a request: the parent the caller's
#: `traceparent` names (an empty Context when it sent none). A conversation created inside a
#: request joins that trace; one created by a tool (a sub-agent) hangs off the tool's span.
REQUEST_PARENT = otel_context.create_key("agent_server.request_parent")


class TraceRef(BaseModel):
    """Where a conversation's spans hang: its trace, its root span, and the span its runs are
    children of (the named span, or the root). Stored in meta.json."""

    trace_id: str = Field(pattern=r"^[0-9a-f]{32}$")
    root_span_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    span_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    sampled: bool = True

    @classmethod
    def of(cls, root: SpanContext, work: SpanContext) -> TraceRef | None:
        if not root.is_valid or not work.is_valid:
            return None
        return cls(
            trace_id=format(root.trace_id, "032x"),
            root_span_id=format(root.span_id, "016x"),
            span_id=format(work.span_id, "016x"),
            sampled=work.trace_flags.sampled,
        )

    def root(self) -> SpanContext:
        """The conversation's root span, as a link to it names it."""
        flags = TraceFlags(TraceFlags.SAMPLED if self.sampled else TraceFlags.DEFAULT)
        return SpanContext(
            int(self.trace_id, 16), int(self.root_span_id, 16), is_remote=True, trace_flags=flags
        )

    def context(self) -> otel_context.Context:
        """A context whose current span is the one runs hang off (from an earlier process)."""
        flags = TraceFlags(TraceFlags.SAMPLED if self.sampled else TraceFlags.DEFAULT)
        parent = SpanContext(
            int(self.trace_id, 16), int(self.span_id, 16), is_remote=True, trace_flags=flags
        )
        return trace.set_span_in_context(NonRecordingSpan(parent), otel_context.Context())


def attribute(value: Any) -> Any:
    """A metadata value as an OTLP attribute: arrays of numbers are all floats when any is."""
    if isinstance(value, list) and any(isinstance(v, float) for v in value):
        return [float(v) for v in value]
    return value


def _masked(mask: Mask, value: Any) -> Any:
    if isinstance(value, str):
        return mask(value)[:MAX_TEXT]
    if isinstance(value, list):
        return [mask(v)[:MAX_TEXT] if isinstance(v, str) else v for v in value]
    return value


class Tracing:
    """The server's tracer, from the provider the composition root built."""

    def __init__(self, provider: trace.TracerProvider, *, recording: bool = False) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(SCOPE)
        #: Spans are recorded by the SDK and exported. Without, the spans inside a run (steps,
        #: LLM and tool calls) are skipped altogether: they would only repeat the run's context.
        self.recording = recording
        #: Spans have ids of their own (tracing on, exported or not): a request without a
        #: caller's trace gets one, for its log lines.
        self.identified = not isinstance(provider, trace.NoOpTracerProvider)

    def shutdown(self) -> None:
        """Flush what is queued and stop the exporter (the lifespan's end)."""
        shutdown = getattr(self.provider, "shutdown", None)
        if shutdown is not None:
            shutdown()

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        context: otel_context.Context | None = None,
        fail_on_exception: bool = True,
    ) -> Iterator[Span]:
        """A span made current for the block; an exception marks it failed by its type alone
        (unless `fail_on_exception` is False: a run ends a step by raising its status).

        Started, made current and ended by hand rather than by `start_as_current_span`, whose
        two nested context managers (and `use_span`'s) cost as much as the span itself: this
        runs for every step, LLM call, tool call and request (issue 30.9)."""
        span = self.tracer.start_span(
            name,
            context=context,
            kind=kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield span
        except BaseException as exc:
            status = getattr(span, "status", None)  # the SDK's span: kept when already set
            if fail_on_exception and span.is_recording() and (status is None or status.is_unset):
                failed(span, type(exc).__name__)
            raise
        finally:
            otel_context.detach(token)
            span.end()

    def inner(
        self,
        name: str,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        fail_on_exception: bool = True,
    ) -> contextlib.AbstractContextManager[Span]:
        """A span inside a run: nothing at all when spans are not recorded."""
        if not self.recording:
            return contextlib.nullcontext(trace.INVALID_SPAN)
        return self.span(
            name, kind=kind, attributes=attributes, fail_on_exception=fail_on_exception
        )

    def request(self, method: str, scheme: str) -> contextlib.AbstractContextManager[Span]:
        """An HTTP request's span (SERVER): whenever spans have ids, so that a request's log
        lines share a trace id even when its caller sent none."""
        if not self.identified:
            return contextlib.nullcontext(trace.INVALID_SPAN)
        return self.span(
            method,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.scheme": scheme},
        )

    # -- conversations ---------------------------------------------------------------------

    def conversation(
        self,
        conversation_id: str,
        *,
        span_name: str | None,
        tags: Sequence[str],
        metadata: Mapping[str, Any],
        mask: Mask,
        parent_conversation_id: str | None = None,
        forked_from: tuple[str, TraceRef | None] | None = None,
    ) -> ConversationTrace:
        """A new conversation's root span (and its named child span), started now; a fork's
        (`forked_from`: the source's id and trace) links to the source's root span."""
        parent = otel_context.get_value(REQUEST_PARENT)
        if not isinstance(parent, otel_context.Context):
            parent = None  # not inside a request: hang off the current span (a tool's)
        attributes: dict[str, Any] = {"gen_ai.conversation.id": conversation_id}
        links: list[Link] = []
        if self.recording:  # else nothing keeps them: no masking, no copying
            if parent_conversation_id is not None:
                attributes["agent_server.parent_conversation.id"] = parent_conversation_id
            if forked_from is not None:
                source_id, source_trace = forked_from
                attributes["agent_server.forked_from.id"] = source_id
                if source_trace is not None:
                    links.append(Link(source_trace.root(), {"agent_server.link": "forked_from"}))
            if tags:
                attributes["tags"] = [mask(t) for t in tags]
            for key, value in metadata.items():
                attributes["metadata." + mask(key)] = _masked(mask, attribute(value))
        root = self.tracer.start_span(
            "conversation", context=parent, attributes=attributes, links=links
        )
        work, named = root, None
        if span_name is not None:
            named = work = self.tracer.start_span(
                mask(span_name),
                context=trace.set_span_in_context(root),
                attributes={"gen_ai.conversation.id": conversation_id},
            )
        ref = TraceRef.of(root.get_span_context(), work.get_span_context())
        return ConversationTrace(self, ref, conversation_id, spans=[s for s in (named, root) if s])

    def resumed(self, ref: TraceRef | None, conversation_id: str) -> ConversationTrace:
        """The trace of a conversation loaded from disk (its root span ended in an earlier
        process, or is still open in this one when `ref` came from a fork's source)."""
        return ConversationTrace(self, ref, conversation_id, spans=[])


class ConversationTrace:
    """One conversation's place in its trace: the parent of its runs' spans."""

    def __init__(
        self, tracing: Tracing, ref: TraceRef | None, conversation_id: str, *, spans: list[Span]
    ) -> None:
        self.tracing = tracing
        self.ref = ref
        self.conversation_id = conversation_id
        #: Spans started in this process (named child first), ended by `end`.
        self._spans = spans
        self._parent = (
            trace.set_span_in_context(spans[0], otel_context.Context())
            if spans
            else ref.context()
            if ref is not None
            else otel_context.Context()
        )

    @contextlib.contextmanager
    def run(self) -> Iterator[Span]:
        """A run's span, under the conversation's, whatever the context the run was started
        from (the run's task copies the context of the request that started it)."""
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": self.conversation_id,
        }
        with self.tracing.span("invoke_agent", context=self._parent, attributes=attributes) as span:
            yield span

    def end(self) -> None:
        """The conversation leaves this process (deleted, or the server stops)."""
        spans, self._spans = self._spans, []
        for span in spans:
            span.end()


def failed(span: Span, error_type: str, description: str | None = None) -> None:
    """Mark a span failed: `error.type` (a class or code name, never a message)."""
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description or error_type))


# -- the LLM call in flight ------------------------------------------------------------------


@dataclass
class LLMCall:
    """What the LLM layer tells about the call in flight (agent_server.agent.llm): the
    provider litellm chose, and each retry."""

    span: Span
    provider: str | None = None
    retries: int = 0

    def retry(self, error_type: str, wait: float) -> None:
        self.retries += 1
        if self.span.is_recording():
            self.span.add_event("retry", {"error.type": error_type, "wait_s": round(wait, 3)})


_CALL: contextvars.ContextVar[LLMCall | None] = contextvars.ContextVar("llm_call", default=None)


@contextlib.contextmanager
def llm_call_context(call: LLMCall) -> Iterator[LLMCall]:
    token = _CALL.set(call)
    try:
        yield call
    finally:
        _CALL.reset(token)


def note_llm_provider(provider: str | None) -> None:
    """Called by the LLM layer once it knows which provider serves the call."""
    call = _CALL.get()
    if call is not None:
        call.provider = provider


def note_llm_retry(error_type: str, wait: float) -> None:
    """Called by the LLM layer before it waits to try again."""
    call = _CALL.get()
    if call is not None:
        call.retry(error_type, wait)


__all__ = [
    "REQUEST_PARENT",
    "ConversationTrace",
    "LLMCall",
    "TraceRef",
    "Tracing",
    "attribute",
    "failed",
    "llm_call_context",
    "note_llm_provider",
    "note_llm_retry",
]
