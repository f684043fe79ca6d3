"""Services: every long-lived object of the agent server, built once from the Config.

`Services.build(config)` is the composition root: the settings store, delivery (each
conversation's fanout), the session factory (the Model over litellm and the shared tool
services; the only place that knows both kinds of agent session) and the catalogue, wired
from nothing but the Config. The app's lifespan yields the result as typed state, which routes
read through `agent_server.api.io.services`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from agent_server.agent.contract import (
    ConversationSpec,
    RunControl,
    Session,
    SessionFactory,
    ToolServices,
)
from agent_server.agent.model import LiteLLMModel, Model
from agent_server.agent.session import AgentSession
from agent_server.agent.sink import EventSink
from agent_server.agent.spec import ACPAgentSpec
from agent_server.agent.toolbox import check_tool_names
from agent_server.agent.traced import TracedModel
from agent_server.agent.usage import Metrics
from agent_server.auth import KeyRing
from agent_server.commands import Commands
from agent_server.config import Config
from agent_server.conversations import ConversationService
from agent_server.delivery import Delivery
from agent_server.network import NetworkClient
from agent_server.settings import SettingsStore
from agent_server.subagents import SubagentHub
from agent_server.telemetry import Telemetry
from agent_server.telemetry.metrics import Sources, WebhookFigures

if TYPE_CHECKING:
    from tools.browser.manager import BrowserManager

logger = logging.getLogger(__name__)
#: Seconds after start-up before litellm starts loading in the background.
PREWARM_DELAY = 0.05


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
    """What the routes use: built once (`build`), started and closed by the app's lifespan."""

    config: Config
    settings: SettingsStore
    conversations: ConversationService
    delivery: Delivery
    keys: KeyRing
    browser: SharedBrowser
    model: Model
    telemetry: Telemetry
    commands: Commands = field(default_factory=Commands)
    network: NetworkClient | None = None
    """This sandbox's network as its control plane sees it (None: no network URL given)."""
    started: float = field(default_factory=time.monotonic)
    last_activity: float = field(default_factory=time.monotonic)
    ready: bool = False
    openapi: dict[str, Any] = field(default_factory=dict)
    """The OpenAPI document, built on its first request (empty until then)."""

    @classmethod
    def build(cls, config: Config, model: Model | None = None) -> Services:
        """Everything wired from the Config; `model` replaces litellm (in-process tests)."""
        telemetry = Telemetry.build(
            config.tracing_enabled,
            config.otlp_traces_endpoint,
            config.traces_sampler,
            config.traces_sampler_arg,
        )
        store = SettingsStore(
            config.state_dir / "settings.json",
            check=lambda settings: check_tool_names(settings.agent.tools),
        )
        # Signed deliveries carry no session key (unless one is set for the webhook).
        webhook_key = config.webhook_api_key or (
            None if config.webhook_secret else config.session_api_keys[0]
        )
        delivery = Delivery(
            config.delivery,
            config.webhook_url,
            webhook_key,
            config.webhook_secret,
            sender=config.webhook_sender,
        )
        browser = SharedBrowser(config.chromium)
        network = (
            NetworkClient(config.network_url, config.network_token or "")
            if config.network_url
            else None
        )
        traced = TracedModel(model or LiteLLMModel(), telemetry)  # every LLM call has its span

        def sessions(catalogue: ConversationService) -> SessionFactory:
            # The catalogue is handed in: sub-agents are conversations of it.
            tools = ToolServices(
                idle_timeout=config.terminal_idle_timeout,
                browser=browser,
                subagents=SubagentHub(catalogue, config.max_subagents),
                network=network,
            )
            return session_factory(traced, tools, telemetry)

        service = ConversationService(
            config.state_dir,
            config.workspace,
            settings=store.get,
            sessions=sessions,
            fanout=delivery,
            telemetry=telemetry,
            hidden=config.own_keys(),
        )
        telemetry.metrics.watch(_metric_sources(service, delivery, network))
        return cls(
            config=config,
            settings=store,
            conversations=service,
            delivery=delivery,
            keys=KeyRing(config.session_api_keys),
            browser=browser,
            model=traced,
            telemetry=telemetry,
            network=network,
        )

    async def start(self) -> None:
        """The state directory, the settings, the conversations found there, then delivery;
        litellm starts loading in the background a moment after (PREWARM_DELAY)."""
        config = self.config
        config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:  # the host's workspace (/api/bash, /api/file) and conversations' default one
            config.workspace.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            logger.warning("cannot create the working directory %s: %s", config.workspace, exc)
        self.settings.load()
        await self.conversations.start()
        await self.delivery.start(lambda: iter(self.conversations))
        self.ready = True
        # What the first conversation's first step needs (litellm) loads in the background
        # from now on, so that step does not wait for it; a moment later, so the first
        # answers to /ready are not slowed by the import.
        asyncio.get_running_loop().call_later(PREWARM_DELAY, self.model.prewarm)

    async def close(self) -> None:
        """Commands, conversations (their last events flushed to the webhook), delivery, the
        browser, then the spans."""
        self.ready = False
        await self.commands.close()
        await self.conversations.close(flush=self.delivery.flush)
        await self.delivery.close()
        await self.browser.close()
        if self.network is not None:
            await self.network.aclose()
        # The conversations' root spans ended as they closed: flush them with the rest.
        await asyncio.to_thread(self.telemetry.shutdown)

    @property
    def guarded(self) -> tuple[str, ...]:
        """The path prefixes that need the session key: /metrics too, unless the configuration
        opens it to scrapers."""
        return ("/api",) if self.config.metrics_open else ("/api", "/metrics")

    def touch(self) -> None:
        self.last_activity = time.monotonic()


class State(TypedDict):
    """The lifespan state Starlette copies into every request (request.state.services)."""

    services: Services


def session_factory(
    model: Model, services: ToolServices, telemetry: Telemetry | None = None
) -> SessionFactory:
    """The sessions of conversations: our own agent over `model`, or an ACP agent (which
    brings its own model and tools), by the agent's kind."""

    def make(
        spec: ConversationSpec,
        sink: EventSink,
        control: RunControl,
        secrets: Mapping[str, str],
        metrics: Metrics,
    ) -> Session:
        if isinstance(spec.agent, ACPAgentSpec):
            # Loaded with the first ACP agent: the protocol's schema costs a server that never
            # runs one about 8 MiB.
            from agent_server.agent.acp import ACPSession

            return ACPSession(spec, sink, control, secrets, metrics, telemetry)
        return AgentSession(spec, sink, control, model, services, secrets, metrics, telemetry)

    return make


def _metric_sources(
    service: ConversationService, delivery: Delivery, network: NetworkClient | None
) -> Sources:
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
        return WebhookFigures(
            pending=totals.pending,
            lag_seconds=hook.lag(),
            failing=totals.failing,
            retries=hook.retries,
        )

    pubsub = delivery.pubsub
    return Sources(
        conversations=by_status,
        websockets=pubsub.count,
        websocket_drops=lambda: {
            "queue": pubsub.overflows,
            "send_timeout": pubsub.send_timeouts,
            "ping_timeout": pubsub.ping_timeouts,
        },
        webhook=webhook,
        network_refused=lambda: None if network is None else network.last_refused,
    )
