"""HTTP requests: one server span each (the caller's `traceparent` continued) and metrics.

The span is named and labelled by the route template (`GET /api/conversations/{conversation_id}`),
never the raw path, and carries no query string, header or body: those may hold keys and
secrets. Probes and scrapes (/health, /alive, /ready, /metrics) are counted but get no span.
A request the router never reached (a 401 from the key check) is labelled by the template its
path matches; one matching none is `unmatched`, so labels stay bounded.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import context as otel_context
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent_server.telemetry import Telemetry
from agent_server.telemetry.tracing import REQUEST_PARENT, failed
from web.telemetry.http import (
    METHODS,
    PROPAGATOR,
    UNTRACED,
    carrier,
    has_traceparent,
    route_template,
)


class Observe:
    """ASGI middleware, outermost: what the access log and the handlers log carries the
    request's trace id."""

    def __init__(self, app: ASGIApp, telemetry: Telemetry, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.telemetry = telemetry
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        method = scope.get("method", "GET")
        method = method if method in METHODS else "OTHER"
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        parent = (
            PROPAGATOR.extract(carrier(scope)) if has_traceparent(scope) else otel_context.Context()
        )
        token = otel_context.attach(otel_context.set_value(REQUEST_PARENT, parent, parent))
        try:
            if scope["path"] in UNTRACED:
                await self.app(scope, receive, sending)
            else:
                await self._traced(scope, receive, sending, method, lambda: status)
        finally:
            otel_context.detach(token)
            self.telemetry.metrics.http_request(
                method, route_template(scope, self.routes), status, time.perf_counter() - started
            )

    async def _traced(
        self, scope: Scope, receive: Receive, send: Send, method: str, status: Any
    ) -> None:
        tracing = self.telemetry.tracing
        with tracing.request(method, scope.get("scheme", "http")) as span:
            try:
                await self.app(scope, receive, send)
            finally:
                if span.is_recording():
                    route = route_template(scope, self.routes)
                    code = status()
                    span.update_name(f"{method} {route}")
                    span.set_attributes({"http.route": route, "http.response.status_code": code})
                    if code >= 500:
                        failed(span, str(code))
