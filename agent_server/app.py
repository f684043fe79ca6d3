"""build_app(config): the whole route table in one place, and the server's lifespan."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route, WebSocketRoute

from agent_server import agent
from agent_server.accesslog import AccessLog
from agent_server.agent.runtime import check_tool_names
from agent_server.api import conversations, events, server, settings, skills, sockets
from agent_server.api import export, metadata, workspace
from agent_server.auth import KeyRing, SessionAuth
from agent_server.config import Config
from agent_server.conversations import ConversationGone, ConversationService
from agent_server.delivery import Delivery, DeliverySettings
from agent_server.errors import HANDLERS, on_gone
from agent_server.settings import SettingsStore

C = "/api/conversations/{conversation_id}"

ROUTES = [
    Route("/health", server.health, methods=["GET"]),
    Route("/alive", server.health, methods=["GET"], name="alive"),
    Route("/ready", server.ready, methods=["GET"]),
    Route("/server_info", server.server_info, methods=["GET"]),
    Route("/openapi.json", server.openapi, methods=["GET"]),
    Route("/api/conversations", conversations.create, methods=["POST"]),
    Route("/api/conversations", conversations.batch_get, methods=["GET"]),
    Route("/api/conversations/search", conversations.search, methods=["GET"]),
    Route("/api/conversations/count", conversations.count, methods=["GET"]),
    Route(C, conversations.get, methods=["GET"]),
    Route(C, conversations.delete, methods=["DELETE"]),
    Route(C + "/run", conversations.run, methods=["POST"]),
    Route(C + "/pause", conversations.pause, methods=["POST"]),
    Route(C + "/interrupt", conversations.interrupt, methods=["POST"]),
    Route(C + "/secrets", conversations.update_secrets, methods=["POST"]),
    Route(C + "/confirmation_policy", conversations.set_confirmation_policy, methods=["POST"]),
    Route(C + "/events/respond_to_confirmation", conversations.respond_to_confirmation,
          methods=["POST"]),
    Route(C + "/hooks", conversations.hooks, methods=["GET"]),
    Route(C + "/skills", skills.list_skills, methods=["GET"]),
    Route(C + "/condense", conversations.condense, methods=["POST"]),
    Route(C + "/events", events.send, methods=["POST"]),
    Route(C + "/events/search", events.search, methods=["GET"]),
    Route(C + "/events/count", events.count, methods=["GET"]),
    Route(C + "/events/{event_id}", events.get, methods=["GET"]),
    Route(C, metadata.update, methods=["PATCH"]),
    Route(C + "/file", workspace.get_file, methods=["GET"]),
    Route(C + "/file", workspace.upload_file, methods=["POST"]),
    Route(C + "/git/changes", workspace.git_changes, methods=["GET"]),
    Route(C + "/git/diff", workspace.git_diff, methods=["GET"]),
    Route(C + "/commands", workspace.run_command, methods=["POST"]),
    Route(C + "/download", export.download, methods=["GET"]),
    Route("/api/settings", settings.get, methods=["GET"]),
    Route("/api/settings", settings.patch, methods=["PATCH"]),
]

# Kept apart from ROUTES, which lists HTTP routes only; websockets check their key themselves.
SOCKETS = [
    WebSocketRoute("/sockets/events/{conversation_id}", sockets.events_socket),
]


def build_app(config: Config) -> Starlette:
    store = SettingsStore(config.state_dir / "settings.json",
                          check=lambda settings: check_tool_names(settings.agent.tools))
    service = ConversationService(
        state_dir=config.state_dir,
        default_working_dir=config.working_dir,
        agent=agent,  # type: ignore[arg-type]
        settings=store.get,
        terminal_idle_timeout=config.terminal_idle_timeout,
    )
    keys = KeyRing(config.session_api_keys)
    delivery = Delivery(config, service, DeliverySettings.from_env())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        store.load()
        await service.start()
        await delivery.start()
        app.state.ready = True
        try:
            yield
        finally:
            app.state.ready = False
            await service.close(flush=delivery.flush)
            await delivery.close()
            if service.browser is not None:
                await service.browser.close()  # no Chromium outlives the server

    app = Starlette(
        routes=[*ROUTES, *SOCKETS],
        middleware=[
            Middleware(AccessLog, on_activity=lambda: setattr(app.state, "last_activity", time.monotonic())),
            Middleware(SessionAuth, keys=keys),
        ],
        exception_handlers={**HANDLERS, ConversationGone: on_gone},  # type: ignore[arg-type]
        lifespan=lifespan,
    )
    app.state.config = config
    app.state.settings = store
    app.state.conversations = service
    app.state.keys = keys
    app.state.delivery = delivery
    app.state.ready = False
    app.state.started = app.state.last_activity = time.monotonic()
    return app
