"""The control plane's metrics in the Prometheus text format (`GET /metrics`, an operator's).

Counters and histograms are bumped where things happen (a start's stage, a provider call, a
webhook batch, a gateway call, an HTTP request); what the database already counts (sandboxes by
status, the start tasks waiting) and what an object already holds (the warm pool's parked
sandboxes, the database pool's connections) is read at scrape time (`Figures`), so nothing is
counted twice and a scrape shows every control plane's sandboxes, not this process's alone.

Labels are bounded: statuses, stages, provider calls and outcomes are enums; reasons are a
fixed set of words; a model's name, a route and a Swarm node are capped (past the cap, new
values count as `other`). No user, sandbox or conversation id is ever a label.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client import Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from web.telemetry import BoundedLabel
from web.telemetry.metrics import Instruments

#: The media type of a scrape (the classic text format every Prometheus reads).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
PREFIX = "control_plane_"
#: Distinct models, Swarm nodes and routes one label takes at most.
MAX_MODELS = 50
MAX_NODES = 200

#: A start's stages and whole walks (seconds): 10 ms to 10 minutes (a clone may take that).
START = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
#: Provider calls and HTTP requests (seconds): 1 ms to 2 minutes.
CALL = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120)
#: The webhook's lag, event made to stored (seconds): 10 ms to an hour (a sandbox that was
#: cut off sends its backlog when it comes back).
LAG = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
#: Events in one webhook batch.
BATCH = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


@dataclass
class Figures:
    """What a scrape reads first (the route gathers it: some of it is a database query)."""

    provider: str = "process"
    sandboxes: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """Sandboxes by (status, node); node is "" off Swarm."""
    start_tasks: Mapping[str, int] = field(default_factory=dict)
    """Unfinished start tasks by stage: the queue."""
    db_pool: Mapping[str, int] = field(default_factory=dict)
    """The database pool's connections by state (size, checked_out, overflow)."""
    warm_pool: tuple[int, int, int] | None = None
    """The warm pool's parked sandboxes waiting, its hits and its misses since start (None:
    no warm pool)."""


class _Collector:
    def __init__(self) -> None:
        self.figures = Figures()

    def collect(self) -> Iterable[Metric]:
        f = self.figures
        sandboxes = GaugeMetricFamily(
            PREFIX + "sandboxes",
            "Sandboxes by status, provider and (on Swarm) node",
            labels=["status", "provider", "node"],
        )
        for (status, node), count in sorted(f.sandboxes.items()):
            sandboxes.add_metric([status, f.provider, node], count)
        yield sandboxes
        queue = GaugeMetricFamily(
            PREFIX + "start_tasks", "Unfinished start tasks by stage", labels=["stage"]
        )
        for stage, count in sorted(f.start_tasks.items()):
            queue.add_metric([stage], count)
        yield queue
        pool = GaugeMetricFamily(
            PREFIX + "db_connections", "The database pool's connections by state", labels=["state"]
        )
        for state, count in sorted(f.db_pool.items()):
            pool.add_metric([state], count)
        yield pool
        if f.warm_pool is not None:
            parked, hits, misses = f.warm_pool
            yield GaugeMetricFamily(
                PREFIX + "warm_pool_parked",
                "Parked sandboxes waiting in the warm pool",
                value=parked,
            )
            claims = CounterMetricFamily(
                PREFIX + "warm_pool_claims",
                "Starts that asked the warm pool, by result (hit, miss)",
                labels=["result"],
            )
            claims.add_metric(["hit"], hits)
            claims.add_metric(["miss"], misses)
            yield claims


class PlaneMetrics(Instruments):
    """The control plane's instruments; `scrape(figures)` is the body of GET /metrics."""

    def __init__(self) -> None:
        super().__init__(PREFIX, CALL)
        r = self.registry
        self.model = BoundedLabel(MAX_MODELS)
        self.node = BoundedLabel(MAX_NODES)
        self.starts = Counter(
            PREFIX + "starts", "Conversation starts ended, by outcome", ["outcome"], registry=r
        )
        self.start_failures = Counter(
            PREFIX + "start_failures",
            "Conversation starts that failed, by reason",
            ["reason"],
            registry=r,
        )
        self.start_seconds = Histogram(
            PREFIX + "start_seconds",
            "A start's time in each stage (`total`: request to READY)",
            ["stage"],
            buckets=START,
            registry=r,
        )
        self.provider_calls = Histogram(
            PREFIX + "provider_call_seconds",
            "Calls on the sandbox provider by call and outcome",
            ["call", "outcome"],
            buckets=CALL,
            registry=r,
        )
        self.webhook_events = Counter(
            PREFIX + "webhook_events", "Events stored from sandboxes' webhook batches", registry=r
        )
        self.webhook_batch = Histogram(
            PREFIX + "webhook_batch_events",
            "Events in one webhook batch",
            buckets=BATCH,
            registry=r,
        )
        self.webhook_lag = Histogram(
            PREFIX + "webhook_lag_seconds",
            "From an event's timestamp to its being stored",
            buckets=LAG,
            registry=r,
        )
        self.llm_requests = Counter(
            PREFIX + "llm_requests",
            "Calls through the LLM gateway by outcome (forwarded, or why refused)",
            ["outcome"],
            registry=r,
        )
        self.llm_tokens = Counter(
            PREFIX + "llm_tokens",
            "Tokens of the gateway's calls by model and type (prompt, completion)",
            ["model", "type"],
            registry=r,
        )
        self.llm_cost = Counter(
            PREFIX + "llm_cost_usd", "Cost of the gateway's calls by model", ["model"], registry=r
        )
        self._collector = _Collector()
        r.register(self._collector)

    # -- what the control plane reports ------------------------------------------------------

    def stage(self, stage: str, seconds: float) -> None:
        self.child(self.start_seconds, stage).observe(seconds)

    def start_ended(self, ready: bool, reason: str | None, seconds: float | None) -> None:
        """A start task's end: READY (`seconds` from its request), or ERROR for `reason`."""
        self.child(self.starts, "ready" if ready else "error").inc()
        if ready and seconds is not None:
            self.stage("total", seconds)
        if not ready:
            self.child(self.start_failures, reason or "unknown").inc()

    def provider_call(self, call: str, outcome: str, seconds: float) -> None:
        self.child(self.provider_calls, call, outcome).observe(seconds)

    def webhook_batch_stored(self, events: int, lags: Iterable[float]) -> None:
        self.webhook_events.inc(events)
        self.webhook_batch.observe(events)
        for lag in lags:
            self.webhook_lag.observe(max(lag, 0.0))

    def llm_request(self, outcome: str) -> None:
        self.child(self.llm_requests, outcome).inc()

    def llm_usage(self, model: str | None, prompt: int, completion: int, cost: float) -> None:
        label = self.model(model or "unknown")
        if prompt:
            self.child(self.llm_tokens, label, "prompt").inc(prompt)
        if completion:
            self.child(self.llm_tokens, label, "completion").inc(completion)
        if cost > 0:
            self.child(self.llm_cost, label).inc(cost)

    def scrape(self, figures: Figures) -> bytes:
        self._collector.figures = figures
        return self.exposition()


__all__ = ["CONTENT_TYPE", "Figures", "PlaneMetrics"]
