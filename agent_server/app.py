"""build_app(config): the whole route table in one place, and the app's lifespan.

The objects behind the routes are built by `agent_server.services.Services.build`, the
composition root; the lifespan starts and closes them and yields them as typed state.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import WebSocketRoute

from agent_server.agent.model import Model
from agent_server.api import (
    bash,
    conversations,
    events,
    export,
    llm,
    metadata,
    server,
    settings,
    skills,
    sockets,
    workspace,
)
from agent_server.auth import SessionAuth
from agent_server.config import Config
from agent_server.services import Services, State
from agent_server.telemetry.http import Observe
from web.accesslog import AccessLog
from web.errors import HANDLERS
from web.routing import Route, literal_first

C = "/api/conversations/{conversation_id}"

# A path a route spells literally is that route's alone (see web.routing).
ROUTES = literal_first(
    [
        Route("/health", server.health, methods=["GET"]),
        Route("/alive", server.health, methods=["GET"], name="alive"),
        Route("/ready", server.ready, methods=["GET"]),
        Route("/server_info", server.server_info, methods=["GET"]),
        Route("/openapi.json", server.openapi, methods=["GET"]),
        Route("/metrics", server.metrics, methods=["GET"]),
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
        Route(
            C + "/events/respond_to_confirmation",
            conversations.respond_to_confirmation,
            methods=["POST"],
        ),
        Route(C + "/hooks", conversations.hooks, methods=["GET"]),
        Route(C + "/skills", skills.list_skills, methods=["GET"]),
        Route("/api/skills", skills.load, methods=["POST"]),
        Route(C + "/condense", conversations.condense, methods=["POST"]),
        Route(C + "/switch_profile", llm.switch_profile, methods=["POST"]),
        Route(C + "/switch_llm", llm.switch_llm, methods=["POST"]),
        Route(C + "/llm_key", llm.rotate_key, methods=["POST"]),
        Route(C + "/navigate", conversations.navigate, methods=["POST"]),
        Route(C + "/fork", conversations.fork, methods=["POST"]),
        Route(C + "/ask_agent", conversations.ask_agent, methods=["POST"]),
        Route(C + "/security_analyzer", conversations.set_security_analyzer, methods=["POST"]),
        Route(C + "/load_plugin", conversations.load_plugin, methods=["POST"]),
        Route(C + "/events", events.send, methods=["POST"]),
        Route(C + "/events/search", events.search, methods=["GET"]),
        Route(C + "/events/count", events.count, methods=["GET"]),
        Route(C + "/events/{event_id}", events.get, methods=["GET"]),
        Route(C, metadata.update, methods=["PATCH"]),
        Route(C + "/file", workspace.get_file, methods=["GET"]),
        Route(C + "/files", workspace.list_files, methods=["GET"]),
        Route(C + "/file", workspace.upload_file, methods=["POST"]),
        Route(C + "/git/changes", workspace.git_changes, methods=["GET"]),
        Route(C + "/git/diff", workspace.git_diff, methods=["GET"]),
        Route(C + "/commands", workspace.run_command, methods=["POST"]),
        # The OpenHands names of the workspace routes, per conversation and for the host.
        *(
            route
            for prefix in (C, "/api")
            for route in (
                Route(prefix + "/file/upload", workspace.upload, methods=["POST"]),
                Route(prefix + "/file/download", workspace.get_file, methods=["GET"]),
                Route(prefix + "/bash/start_bash_command", bash.start, methods=["POST"]),
                Route(prefix + "/bash/execute_bash_command", bash.execute, methods=["POST"]),
                Route(prefix + "/bash/bash_events/search", bash.search, methods=["GET"]),
                Route(
                    prefix + "/bash/bash_commands/{command_id}/stop", bash.stop, methods=["POST"]
                ),
            )
        ),
        Route("/api/files", workspace.list_files, methods=["GET"]),
        Route("/api/git/changes", workspace.git_changes, methods=["GET"]),
        Route("/api/git/diff", workspace.git_diff, methods=["GET"]),
        Route(C + "/download", export.download, methods=["GET"]),
        Route("/api/settings", settings.get, methods=["GET"]),
        Route("/api/settings", settings.patch, methods=["PATCH"]),
    ]
)

# Kept apart from ROUTES, which lists HTTP routes only; websockets check their key themselves.
SOCKETS = [
    WebSocketRoute("/sockets/events/{conversation_id}", sockets.events_socket),
]


def build_app(config: Config, model: Model | None = None) -> Starlette:
    """The server for `config`; `model` replaces litellm (the loop's in-process tests)."""
    services = Services.build(config, model)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[State]:
        await services.start()
        try:
            yield {"services": services}
        finally:
            await services.close()

    return Starlette(
        routes=[*ROUTES, *SOCKETS],
        middleware=[
            # Outermost: the access log line and the handlers' records carry the trace id.
            Middleware(Observe, telemetry=services.telemetry, routes=ROUTES),
            Middleware(AccessLog, logger="agent_server.access", on_activity=services.touch),
            Middleware(SessionAuth, keys=services.keys, prefixes=services.guarded),
        ],
        exception_handlers=HANDLERS,
        lifespan=lifespan,
    )
