"""A start task's walk as its operator sees it: a span per stage under the job's span, and the
time spent in each stage (`control_plane_start_seconds{stage}`), then the whole walk from the
request to READY (`stage="total"`) or the failure's reason.

A stage's span is the current one while the stage runs, so the provider's calls and the agent
server's (which continues the trace into the sandbox) hang under the stage they belong to.
"""

from __future__ import annotations

import time
from contextvars import Token
from datetime import datetime

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from control_plane.telemetry import Telemetry, failed


class Stages:
    """One task's stages, entered in order by the one job that walks it."""

    def __init__(self, telemetry: Telemetry, requested_at: datetime) -> None:
        self.telemetry = telemetry
        self.requested_at = requested_at
        self._stage: tuple[str, float, Span, Token[otel_context.Context]] | None = None

    def enter(self, stage: str) -> None:
        """`stage` begins (and the one before it ends); the stage it is in already goes on
        (a placement is stored as WORKING, the stage a new task starts in)."""
        if self._stage is not None and self._stage[0] == stage:
            return
        self._leave()
        span = self.telemetry.tracer.start_span(f"start_task.stage {stage}")
        token = otel_context.attach(trace.set_span_in_context(span))
        self._stage = (stage, time.perf_counter(), span, token)

    def end(self, now: datetime, reason: str | None = None) -> None:
        """The walk ended: READY (`reason` None) at `now`, or ERROR for `reason` (a word)."""
        if reason is not None and self._stage is not None and self._stage[2].is_recording():
            failed(self._stage[2], reason)
        self._leave()
        seconds = (now - self.requested_at).total_seconds()
        self.telemetry.metrics.start_ended(reason is None, reason, seconds)

    def close(self) -> None:
        """The job ends (done, stopped, or taken by another control plane)."""
        self._leave()

    def _leave(self) -> None:
        if self._stage is None:
            return
        stage, started, span, token = self._stage
        self._stage = None
        self.telemetry.metrics.stage(stage, time.perf_counter() - started)
        span.end()
        otel_context.detach(token)


__all__ = ["Stages"]
