"""build_app(config): the whole route table in one place, and the one composition root.

Everything is wired here, from nothing but the Config: the settings store, delivery (each
conversation's fanout), the session factory (the Model over litellm and the shared tool
services) and the catalogue. The lifespan yields them as typed state (`Services`), which the
routes read through `agent_server.api.io.services`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route, WebSocketRoute

from agent_server.accesslog import AccessLog
from agent_server.agent.model import LiteLLMModel, Model
from agent_server.agent.session import ToolServices, session_factory
from agent_server.agent.toolbox import check_tool_names
from agent_server.api import conversations, events, server, settings, skills, sockets
from agent_server.api import bash, export, llm, metadata, workspace
from agent_server.auth import KeyRing, SessionAuth
from agent_server.commands import Commands
from agent_server.config import Config
from agent_server.conversations import ConversationService
from agent_server.delivery import Delivery
from agent_server.errors import HANDLERS
from agent_server.settings import SettingsStore
from agent_server.subagents import SubagentHub
from agent_server.agent.traced import TracedModel
from agent_server.telemetry import Telemetry
from agent_server.telemetry.http import Observe
from agent_server.telemetry.metrics import Sources, WebhookFigures

if TYPE_CHECKING:
    from tools.browser.manager import BrowserManager

logger = logging.getLogger(__name__)
C = "/api/conversations/{conversation_id}"
#: Seconds after start-up before litellm starts loading in the background.
PREWARM_DELAY = 0.05

ROUTES = [
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
    Route(C + "/events/respond_to_confirmation", conversations.respond_to_confirmation,
          methods=["POST"]),
    Route(C + "/hooks", conversations.hooks, methods=["GET"]),
    Route(C + "/skills", skills.list_skills, methods=["GET"]),
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
    Route(C + "/file", workspace.upload_file, methods=["POST"]),
    Route(C + "/git/changes", workspace.git_changes, methods=["GET"]),
    Route(C + "/git/diff", workspace.git_diff, methods=["GET"]),
    Route(C + "/commands", workspace.run_command, methods=["POST"]),
    # The OpenHands names of the workspace routes, per conversation and for the host.
    *(route for prefix in (C, "/api") for route in (
        Route(prefix + "/file/upload", workspace.upload, methods=["POST"]),
        Route(prefix + "/file/download", workspace.get_file, methods=["GET"]),
        Route(prefix + "/bash/start_bash_command", bash.start, methods=["POST"]),
        Route(prefix + "/bash/execute_bash_command", bash.execute, methods=["POST"]),
        Route(prefix + "/bash/bash_events/search", bash.search, methods=["GET"]),
        Route(prefix + "/bash/bash_commands/{command_id}/stop", bash.stop, methods=["POST"]),
    )),
    Route("/api/git/changes", workspace.git_changes, methods=["GET"]),
    Route("/api/git/diff", workspace.git_diff, methods=["GET"]),
    Route(C + "/download", export.download, methods=["GET"]),
    Route("/api/settings", settings.get, methods=["GET"]),
    Route("/api/settings", settings.patch, methods=["PATCH"]),
]

# Kept apart from ROUTES, which lists HTTP routes only; websockets check their key themselves.
SOCKETS = [
    WebSocketRoute("/sockets/events/{conversation_id}", sockets.events_socket),
]


class SharedBrowser:
    """The server's one Chromium manager, made when a conversation first has browser tools
    (Playwright is imported only then); Chromium itself starts on the first browser call."""

    def __init__(self, executable: str) -> None:
        self.executable = executable
        self.manager: BrowserManager | None = None

    def __call__(self) -> BrowserManager:
        if self.manager is None:
            from tools.browser.manager import BrowserManager, BrowserSettings

            self.manager = BrowserManager(BrowserSettings(executable=self.executable))
        return self.manager

    async def close(self) -> None:
        if self.manager is not None:
            await self.manager.close()  # no Chromium outlives the server


@dataclass
class Services:
    """What the routes use, built once by build_app."""

    config: Config
    settings: SettingsStore
    conversations: ConversationService
    delivery: Delivery
    keys: KeyRing
    browser: SharedBrowser
    model: Model
    telemetry: Telemetry
    commands: Commands = field(default_factory=Commands)
    started: float = field(default_factory=time.monotonic)
    last_activity: float = field(default_factory=time.monotonic)
    ready: bool = False

    def touch(self) -> None:
        self.last_activity = time.monotonic()


class State(TypedDict):
    """The lifespan state Starlette copies into every request (request.state.services)."""

    services: Services


def build_services(config: Config, model: Model | None = None) -> Services:
    telemetry = Telemetry.build(config.tracing_enabled, config.otlp_traces_endpoint)
    store = SettingsStore(config.state_dir / "settings.json",
                          check=lambda settings: check_tool_names(settings.agent.tools))
    delivery = Delivery(config.delivery, config.webhook_url,
                        config.webhook_api_key or config.session_api_keys[0],
                        config.webhook_secret)
    browser = SharedBrowser(config.chromium)
    subagents = SubagentHub()  # sub-agents are conversations of the catalogue made below
    model = TracedModel(model or LiteLLMModel(), telemetry)  # every LLM call has its span
    make_session = session_factory(
        model, ToolServices(idle_timeout=config.terminal_idle_timeout, browser=browser,
                            subagents=subagents), telemetry)
    service = ConversationService(config.state_dir, config.working_dir, settings=store.get,
                                  make_session=make_session, fanout=delivery, telemetry=telemetry)
    subagents.service = service
    telemetry.metrics.watch(_metric_sources(service, delivery))
    return Services(config=config, settings=store, conversations=service, delivery=delivery,
                    keys=KeyRing(config.session_api_keys), browser=browser, model=model,
                    telemetry=telemetry)


def _metric_sources(service: ConversationService, delivery: Delivery) -> Sources:
    """What GET /metrics reads at scrape time from the objects that keep the counts."""

    def by_status() -> dict[str, int]:
        counts: dict[str, int] = {}
        for conv in service:
            counts[conv.status.value] = counts.get(conv.status.value, 0) + 1
        return counts

    def webhook() -> WebhookFigures | None:
        hook = delivery.webhook
        if hook is None:
            return None
        totals = hook.totals()
        return WebhookFigures(pending=totals.pending, lag_seconds=hook.lag(),
                              failing=totals.failing, retries=hook.retries)

    pubsub = delivery.pubsub
    return Sources(conversations=by_status, websockets=pubsub.count,
                   websocket_drops=lambda: {"queue": pubsub.overflows,
                                            "send_timeout": pubsub.send_timeouts},
                   webhook=webhook)


def build_app(config: Config, model: Model | None = None) -> Starlette:
    """The server for `config`; `model` replaces litellm (the loop's in-process tests)."""
    services = build_services(config, model)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[State]:
        config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:  # the host's workspace (/api/bash, /api/file) and conversations' default one
            config.working_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            logger.warning("cannot create the working directory %s: %s", config.working_dir, exc)
        services.settings.load()
        await services.conversations.start()
        await services.delivery.start(lambda: iter(services.conversations))
        services.ready = True
        # What the first conversation's first step needs (litellm) loads in the background
        # from now on, so that step does not wait for it; a moment later, so the first
        # answers to /ready are not slowed by the import.
        asyncio.get_running_loop().call_later(PREWARM_DELAY, services.model.prewarm)
        try:
            yield {"services": services}
        finally:
            services.ready = False
            await services.commands.close()
            await services.conversations.close(flush=services.delivery.flush)
            await services.delivery.close()
            await services.browser.close()
            # The conversations' root spans ended as they closed: flush them with the rest.
            await asyncio.to_thread(services.telemetry.shutdown)

    # /metrics needs the key too, unless the configuration opens it to scrapers.
    guarded = ("/api",) if config.metrics_open else ("/api", "/metrics")
    app = Starlette(
        routes=[*ROUTES, *SOCKETS],
        middleware=[
            # Outermost: the access log line and the handlers' records carry the trace id.
            Middleware(Observe, telemetry=services.telemetry, routes=ROUTES),
            Middleware(AccessLog, on_activity=services.touch),
            Middleware(SessionAuth, keys=services.keys, prefixes=guarded),
        ],
        exception_handlers=HANDLERS,
        lifespan=lifespan,
    )
    app.state.guarded = guarded  # what the OpenAPI document marks as needing the key
    return app
