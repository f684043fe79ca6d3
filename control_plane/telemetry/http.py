"""HTTP requests to the control plane: one server span each (the caller's `traceparent`
continued) and their metrics, by route template (`web.telemetry.http`).

The span carries the method, the route template and the status: no query string, header or
body (they may hold keys). Probes and scrapes are counted but get no span. Log lines written
while a request is handled carry its span's trace id (`web.logs.JsonFormatter`): the request
id its trace shares.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from control_plane.telemetry import Telemetry, failed
from web.telemetry.http import (
    METHODS,
    PROPAGATOR,
    UNTRACED,
    carrier,
    has_traceparent,
    route_template,
)


class Observe:
    """ASGI middleware, outermost."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The lifespan's services hold it (Starlette copies their state into each request's).
        telemetry = getattr(scope.get("state", {}).get("services"), "telemetry", None)
        if scope["type"] != "http" or not isinstance(telemetry, Telemetry):
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

        token = (
            otel_context.attach(PROPAGATOR.extract(carrier(scope)))
            if has_traceparent(scope)
            else None
        )
        try:
            if scope["path"] in UNTRACED:
                await self.app(scope, receive, sending)
                return
            with telemetry.span(method, kind=SpanKind.SERVER) as span:
                try:
                    await self.app(scope, receive, sending)
                finally:
                    if span.is_recording():
                        route = route_template(scope, self.routes)
                        span.update_name(f"{method} {route}")
                        span.set_attributes(
                            {"http.route": route, "http.response.status_code": status}
                        )
                        if status >= 500:
                            failed(span, str(status))
        finally:
            if token is not None:
                otel_context.detach(token)
            telemetry.metrics.http_request(
                method, route_template(scope, self.routes), status, time.perf_counter() - started
            )
