"""build_app(config): the whole route table in one place, and the control plane's lifespan."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import uvicorn
from sqlalchemy.exc import SQLAlchemyError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from control_plane import app_urls
from control_plane.api import (
    admin,
    apps,
    controls,
    events,
    fences,
    files,
    gateway,
    llm,
    metrics,
    sandboxes,
    server,
    settings,
    start_tasks,
    users,
    webhooks,
)
from control_plane.api import app_conversations as convs
from control_plane.api.io import LifespanState
from control_plane.config import Config
from control_plane.console import SecurityHeaders, static_files
from control_plane.providers.process.isolation import IsolationUnavailable
from control_plane.relay import Bell
from control_plane.sandbox_side import SandboxSide, Side
from control_plane.sandboxes.provider import SandboxProvider
from control_plane.services import Services
from control_plane.storage_errors import on_storage
from control_plane.telemetry.http import Observe
from core.retry import Clock
from web.accesslog import AccessLog
from web.errors import HANDLERS
from web.routing import Route, literal_first

V1 = "/api/v1"
C = V1 + "/app-conversations/{conversation_id}"
S = V1 + "/sandboxes/{sandbox_id}"
APPS = app_urls.PREFIX

ROUTES = [
    Route("/health", server.health, methods=["GET"]),
    Route("/alive", server.health, methods=["GET"], name="alive"),
    Route("/ready", server.ready, methods=["GET"]),
    Route("/openapi.json", server.openapi_json, methods=["GET"]),
    Route("/metrics", metrics.scrape, methods=["GET"]),
    Route(V1 + "/app-conversations", start_tasks.start, methods=["POST"]),
    Route(V1 + "/app-conversations/stream-start", start_tasks.stream_start, methods=["POST"]),
    Route(V1 + "/app-conversations", convs.batch_get, methods=["GET"]),
    Route(V1 + "/app-conversations/start-tasks", start_tasks.batch_get, methods=["GET"]),
    Route(V1 + "/app-conversations/start-tasks/search", start_tasks.search, methods=["GET"]),
    Route(V1 + "/app-conversations/start-tasks/count", start_tasks.count, methods=["GET"]),
    Route(V1 + "/app-conversations/search", convs.search, methods=["GET"]),
    Route(V1 + "/app-conversations/count", convs.count, methods=["GET"]),
    Route(C, convs.patch, methods=["PATCH"]),
    Route(C, convs.delete, methods=["DELETE"]),
    Route(C + "/send-message", convs.send_message, methods=["POST"]),
    Route(C + "/download", convs.download, methods=["GET"]),
    Route(C + "/pause", controls.pause, methods=["POST"]),
    Route(C + "/interrupt", controls.interrupt, methods=["POST"]),
    Route(C + "/confirmation-policy", controls.confirmation_policy, methods=["POST"]),
    Route(C + "/respond-to-confirmation", controls.respond_to_confirmation, methods=["POST"]),
    Route(C + "/llm", controls.llm, methods=["POST"]),
    Route(C + "/file", convs.file, methods=["GET"]),
    Route(C + "/files", files.files, methods=["GET"]),
    Route(C + "/generate-title", llm.generate_title, methods=["POST"]),
    Route(C + "/git/changes", convs.git_changes, methods=["GET"]),
    Route(C + "/git/diff", convs.git_diff, methods=["GET"]),
    Route(C + "/skills", convs.skills, methods=["GET"]),
    Route(C + "/hooks", convs.hooks, methods=["GET"]),
    Route(V1 + "/conversation/{conversation_id}/events/search", events.search, methods=["GET"]),
    Route(V1 + "/conversation/{conversation_id}/events/count", events.count, methods=["GET"]),
    Route(V1 + "/conversation/{conversation_id}/events/stream", events.stream, methods=["GET"]),
    Route(V1 + "/sandboxes", sandboxes.create, methods=["POST"]),
    Route(V1 + "/sandboxes", sandboxes.batch_get, methods=["GET"]),
    Route(V1 + "/sandboxes/search", sandboxes.search, methods=["GET"]),
    Route(S + "/pause", sandboxes.pause, methods=["POST"]),
    Route(S + "/resume", sandboxes.resume, methods=["POST"]),
    Route(S + "/idle-status", sandboxes.idle_status, methods=["GET"]),
    Route(S + "/settings/secrets", users.secret_names, methods=["GET"]),
    Route(S + "/settings/secrets/{secret_name}", users.secret_value, methods=["GET"]),
    Route(S, sandboxes.delete, methods=["DELETE"]),
    Route(S, sandboxes.patch, methods=["PATCH"]),
    Route(S + "/network", sandboxes.network, methods=["GET"]),
    Route(S + "/app-url", apps.app_url, methods=["GET"]),
    Route(V1 + "/network/fences", fences.report, methods=["POST"]),
    Route(V1 + "/sandbox-specs/search", sandboxes.specs, methods=["GET"]),
    Route(V1 + "/users/me", users.me, methods=["GET"]),
    Route(V1 + "/settings", settings.get, methods=["GET"]),
    Route(V1 + "/settings", settings.patch, methods=["PATCH"]),
    Route(V1 + "/settings/llm-check", llm.check, methods=["POST"]),
    Route(V1 + "/settings/llm-models", llm.models, methods=["GET"]),
    Route(V1 + "/llm-usage", gateway.usage, methods=["GET"]),
    Route(V1 + "/llm/{path:path}", gateway.forward, methods=["GET", "POST"]),
    Route(V1 + "/webhooks/events/{conversation_id}", webhooks.receive, methods=["POST"]),
    Route(V1 + "/webhooks/conversations", webhooks.conversation, methods=["POST"]),
    Route(V1 + "/admin/audit", admin.audit, methods=["GET"]),
    # The web apps sandboxes serve, for browsers (outside /api/v1: a link is its credential).
    Route(
        APPS + "{rest:path}",
        apps.proxy,
        methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
        name="sandbox-apps",
    ),
]
#: Literal paths first (`web.routing`): PATCH .../app-conversations/count is a 405.
ROUTES = literal_first(ROUTES)


def build_app(
    config: Config, provider: SandboxProvider | None = None, clock: Clock | None = None
) -> Starlette:
    """The ASGI app; its services are built and started by the lifespan, and handed to routes
    through the lifespan state (typed: `api.io.LifespanState`). `app.state.bell` is the live
    relays' bell, for `Server` to end them."""
    bell = Bell()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[LifespanState]:
        services = Services.build(config, provider, clock, bell)
        side: Side | None = None
        try:
            await services.start()
            state = LifespanState(services=services)
            # Where the sandboxes reach this control plane (their side of the boundary).
            side = Side(
                app, dict(state), config.host, config.port, config.sandbox_port, config.log_level
            )
            side.start()
            yield state
        finally:
            if side is not None:
                await side.close()
            await services.close(stop_sandboxes=config.stop_sandboxes_on_exit)

    # After the API: the web console's files (`/` is its page).
    routes = [*ROUTES, server.Unserved(), Mount("/", static_files(), name="console")]
    handlers: dict[Any, Callable[..., Any]] = {**HANDLERS, SQLAlchemyError: on_storage}
    app = Starlette(
        routes=routes,
        exception_handlers=handlers,
        middleware=[
            Middleware(StartRefusal),
            Middleware(Observe, routes=routes),
            Middleware(AccessLog, logger="control_plane.access", redact=app_urls.logged),
            Middleware(SecurityHeaders),
            Middleware(SandboxSide),
        ],
        lifespan=lifespan,
    )
    app.state.bell = bell
    return app


class StartRefusal:
    """A control plane that refuses to start (the isolation or the network boundary asked for
    cannot be had here) says why in one line: Starlette hands the server the lifespan's whole
    traceback, which buries the reason under frames that are not its cause."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        held: list[Message] = []

        async def holding_failure(message: Message) -> None:
            if message["type"] == "lifespan.startup.failed":
                held.append(message)  # sent once the exception says what it was
                return
            await send(message)

        try:
            await self.app(scope, receive, holding_failure)
        except IsolationUnavailable as exc:
            if held:
                await send({**held[0], "message": f"control-plane cannot start: {exc}"})
            raise
        except BaseException:
            for message in held:
                await send(message)
            raise


class Server(uvicorn.Server):
    """uvicorn's server, ending the live event streams first when it stops: uvicorn waits for
    open responses before the lifespan ends, so the streams would hold the shutdown up to its
    time limit (a browser reconnects with Last-Event-ID and resumes where it was).

    It runs on asyncio's own event loop, never uvloop: the control plane starts a command
    (`ip`, `nft`) or a few for every sandbox it starts, stops or fences, and uvloop starts
    each with a fork() of the whole process, which blocked the loop for 20 ms and more once
    the process had grown (litellm imported, 174 MiB: 20 ms median to start `true`, against
    1 ms with asyncio's vfork; `bench/spawn.py`); a burst of starts queued behind them."""

    def __init__(self, config: uvicorn.Config) -> None:
        config.loop = "asyncio"
        super().__init__(config)

    async def shutdown(self, sockets: Any = None) -> None:
        bell = getattr(getattr(self.config.app, "state", None), "bell", None)
        if isinstance(bell, Bell):
            bell.close()
        await super().shutdown(sockets)
