"""What an HTTP request is labelled and traced by, in both services: its route template (never
the raw path, which may carry ids without end), its method among the known ones, and the
caller's W3C trace context (`traceparent`, `tracestate`: the only headers read). Probes and
scrapes are counted but get no span."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

UNTRACED = frozenset({"/health", "/alive", "/ready", "/metrics"})
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "unmatched"
PROPAGATOR = TraceContextTextMapPropagator()


def carrier(scope: Scope) -> dict[str, str]:
    """traceparent and tracestate, the only headers the propagator reads."""
    out: dict[str, str] = {}
    for key, value in scope.get("headers", ()):
        if key in (b"traceparent", b"tracestate"):
            out[key.decode("latin-1")] = value.decode("latin-1")
    return out


def route_template(scope: Scope, routes: Sequence[BaseRoute]) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    for candidate in routes:  # the router was not reached (a 401): find it ourselves
        match, _ = candidate.matches(scope)
        if match is not Match.NONE:
            return str(getattr(candidate, "path", UNMATCHED))
    return UNMATCHED


def has_traceparent(scope: Scope) -> bool:
    return any(key == b"traceparent" for key, _ in scope.get("headers", ()))


def trace_headers() -> dict[str, str]:
    """The current trace as W3C headers (`traceparent`, `tracestate`) for a call out, which the
    service called continues; empty when there is no trace."""
    out: dict[str, str] = {}
    PROPAGATOR.inject(out)
    return out
