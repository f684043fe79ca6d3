"""Routes about the server itself: liveness, readiness, facts, the OpenAPI document."""

from __future__ import annotations

import time

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agent_server import __version__
from agent_server.api.io import services
from agent_server.auth import HEADER
from agent_server.record import WebhookTotals
from web.io import doc, reply


class Status(BaseModel):
    status: str


class ServerInfo(BaseModel):
    """What the server is; how busy it is only to a caller with the session key: a neighbour
    that reaches the port learns nothing of the sandbox's activity (those fields are null)."""

    title: str = "agent-server"
    version: str
    usable_tools: list[str]
    uptime: float | None = None
    idle_time: float | None = None
    conversations: int | None = None
    running: int | None = None
    websockets: int | None = None
    """Sockets subscribed to conversations' events."""
    webhook: WebhookTotals | None = None
    """The webhook push over all conversations (null when no webhook is configured)."""


@doc(summary="Alive (no key needed)", response=Status)
async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


@doc(
    summary="200 once conversations can be created and run (no key needed)",
    response=Status,
    errors=(503,),
)
async def ready(request: Request) -> Response:
    state = getattr(request.state, "services", None)
    if state is None or not state.ready:
        return JSONResponse({"status": "initializing"}, status_code=503)
    return JSONResponse({"status": "ready"})


@doc(
    summary="Version and tool names; uptime and activity with the session key", response=ServerInfo
)
async def server_info(request: Request) -> Response:
    import tools

    state = services(request)
    if not state.keys.accepts(request.headers.get(HEADER)):
        return reply(ServerInfo(version=__version__, usable_tools=sorted(tools.TOOL_SETS)))
    convs = list(state.conversations)
    now = time.monotonic()
    return reply(
        ServerInfo(
            version=__version__,
            uptime=now - state.started,
            idle_time=now - state.last_activity,
            usable_tools=sorted(tools.TOOL_SETS),
            conversations=len(convs),
            running=sum(1 for c in convs if c.running),
            websockets=state.delivery.pubsub.count(),
            webhook=state.delivery.totals(),
        )
    )


@doc(summary="This document (OpenAPI 3.1.0)", response=dict)
async def openapi(request: Request) -> Response:
    from agent_server import openapi

    document = services(request).openapi
    if not document:  # the routes do not change while the server runs
        document.update(openapi.build(request.app.routes, services(request).guarded))
    return JSONResponse(document)


@doc(
    summary="Metrics in the Prometheus text format (the session key, unless "
    "AGENT_SERVER_METRICS_OPEN)",
    media={"text/plain": {"type": "string"}},
)
async def metrics(request: Request) -> Response:
    from agent_server.telemetry.metrics import CONTENT_TYPE

    state = services(request)
    if state.network is not None:  # the control plane's count, asked now (within its timeout)
        await state.network.refresh()
    # On the event loop: the collectors read the conversations and sockets as they are.
    return Response(state.telemetry.metrics.scrape(), media_type=CONTENT_TYPE)
