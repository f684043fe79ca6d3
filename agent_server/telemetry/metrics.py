"""Metrics in the Prometheus text format (`GET /metrics`), on a registry of the app's own.

Counters and histograms are bumped where things happen (a step, an LLM call, a tool call, an
event-log write, an HTTP request); what already has a count somewhere (conversations by status,
sockets, the webhook's lag) is read at scrape time from the object that keeps it, through the
functions the composition root hands to `watch`, so nothing is counted twice.

Labels are bounded: model and tool names come from clients and models, so past a few dozen
distinct values new ones are counted as `other` (a scrape never grows without end).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from web.telemetry import OTHER, BoundedLabel
from web.telemetry.metrics import Instruments

#: The media type of a scrape (the classic text format every Prometheus reads).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
PREFIX = "agent_server_"
#: Distinct values one label takes at most before new ones count as OTHER.
MAX_MODELS = 50
MAX_TOOLS = 200

#: Latency buckets (seconds) for LLM calls and tools: 50 ms to 10 minutes.
SLOW = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
#: fsync buckets (seconds): 50 µs to 1 s.
FSYNC = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
)
#: HTTP request buckets (seconds).
HTTP = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 30)


@dataclass
class WebhookFigures:
    """The webhook push over all conversations at one moment."""

    pending: int = 0
    """Stored events not acknowledged yet."""
    lag_seconds: float = 0.0
    """How long the oldest unacknowledged event has waited (0 when none waits)."""
    failing: int = 0
    """Conversations whose last attempt failed."""
    retries: int = 0
    """Failed attempts since start (each is retried)."""


@dataclass
class Sources:
    """What is read at scrape time (set by the composition root)."""

    conversations: Callable[[], Mapping[str, int]] = dict
    """Conversations by execution status."""
    websockets: Callable[[], int] = lambda: 0
    websocket_drops: Callable[[], Mapping[str, int]] = dict
    """Sockets closed because their client fell behind, by reason, since start."""
    webhook: Callable[[], WebhookFigures | None] = lambda: None
    network_refused: Callable[[], int | None] = lambda: None
    """The sandbox's connections its network policy refused, as its control plane counts
    them (refreshed by the scrape's route first); None: unknown, or no network boundary."""


class _Collector:
    def __init__(self) -> None:
        self.sources = Sources()

    def collect(self) -> Iterable[Metric]:
        s = self.sources
        by_status = GaugeMetricFamily(
            PREFIX + "conversations", "Conversations by execution status", labels=["status"]
        )
        for status, count in sorted(s.conversations().items()):
            by_status.add_metric([status], count)
        yield by_status
        yield GaugeMetricFamily(
            PREFIX + "websocket_subscribers",
            "Sockets subscribed to conversations' events",
            value=s.websockets(),
        )
        drops = CounterMetricFamily(
            PREFIX + "websocket_drops",
            "Sockets closed (1013) because their client fell behind",
            labels=["reason"],
        )
        for reason, count in sorted(s.websocket_drops().items()):
            drops.add_metric([reason], count)
        yield drops
        hook = s.webhook()
        if hook is not None:
            yield GaugeMetricFamily(
                PREFIX + "webhook_pending_events",
                "Stored events the webhook has not acknowledged yet",
                value=hook.pending,
            )
            yield GaugeMetricFamily(
                PREFIX + "webhook_lag_seconds",
                "Age of the oldest event waiting for the webhook",
                value=hook.lag_seconds,
            )
            yield GaugeMetricFamily(
                PREFIX + "webhook_failing_conversations",
                "Conversations whose last webhook attempt failed",
                value=hook.failing,
            )
            yield CounterMetricFamily(
                PREFIX + "webhook_retries",
                "Failed webhook attempts (each is retried)",
                value=hook.retries,
            )
        refused = s.network_refused()
        if refused is not None:
            yield CounterMetricFamily(
                PREFIX + "network_refused",
                "Connections the sandbox's network policy refused, as "
                "its control plane counts them",
                value=refused,
            )


class ServerMetrics(Instruments):
    """The app's instruments; `scrape()` is the body of GET /metrics."""

    def __init__(self) -> None:
        super().__init__(PREFIX, HTTP)
        r = self.registry
        self.model = BoundedLabel(MAX_MODELS)
        self.tool = BoundedLabel(MAX_TOOLS)
        self.steps = Counter(
            PREFIX + "steps", "Agent steps taken (one LLM response each)", registry=r
        )
        self.llm_calls = Counter(
            PREFIX + "llm_calls", "LLM calls by model and outcome", ["model", "outcome"], registry=r
        )
        self.llm_tokens = Counter(
            PREFIX + "llm_tokens",
            "Tokens by model and type (input, output)",
            ["model", "type"],
            registry=r,
        )
        self.llm_cost = Counter(
            PREFIX + "llm_cost_usd",
            "Cost of LLM calls (litellm's price map)",
            ["model"],
            registry=r,
        )
        self.llm_retries = Counter(
            PREFIX + "llm_retries", "LLM attempts retried", ["model"], registry=r
        )
        self.llm_seconds = Histogram(
            PREFIX + "llm_call_seconds",
            "LLM call time, retries included",
            ["model"],
            buckets=SLOW,
            registry=r,
        )
        self.tool_calls = Counter(
            PREFIX + "tool_calls", "Tool calls by tool and outcome", ["tool", "outcome"], registry=r
        )
        self.tool_seconds = Histogram(
            PREFIX + "tool_call_seconds", "Tool call time", ["tool"], buckets=SLOW, registry=r
        )
        self.log_appends = Counter(
            PREFIX + "event_log_appends", "Events written to the logs", registry=r
        )
        self.log_fsync = Histogram(
            PREFIX + "event_log_fsync_seconds",
            "Time of one durable log write (write and fdatasync)",
            buckets=FSYNC,
            registry=r,
        )
        self._collector = _Collector()
        r.register(self._collector)

    def watch(self, sources: Sources) -> None:
        self._collector.sources = sources

    # -- what the server reports -------------------------------------------------------------

    def log_written(self, events: int, seconds: float) -> None:
        """One durable write of the event log (a group commit of `events` events)."""
        self.log_appends.inc(events)
        self.log_fsync.observe(seconds)

    def llm_call(
        self,
        model: str,
        outcome: str,
        seconds: float,
        retries: int,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost: float = 0.0,
    ) -> None:
        label = self.model(model)
        self.child(self.llm_calls, label, outcome).inc()
        self.child(self.llm_seconds, label).observe(seconds)
        if retries:
            self.child(self.llm_retries, label).inc(retries)
        if input_tokens:
            self.child(self.llm_tokens, label, "input").inc(input_tokens)
        if output_tokens:
            self.child(self.llm_tokens, label, "output").inc(output_tokens)
        if cost > 0:
            self.child(self.llm_cost, label).inc(cost)

    def tool_call(self, tool: str, outcome: str, seconds: float) -> None:
        label = self.tool(tool)
        self.child(self.tool_calls, label, outcome).inc()
        self.child(self.tool_seconds, label).observe(seconds)

    def scrape(self) -> bytes:
        return self.exposition()


__all__ = ["CONTENT_TYPE", "OTHER", "BoundedLabel", "ServerMetrics", "Sources", "WebhookFigures"]
