"""What both services' Prometheus metrics share: a registry of the service's own (several
servers may share a process, as the tests' do), label children kept (the client's lookup, a
validation and a lock, costs more than the increment), and the HTTP requests counted by route
template (`web.telemetry.http`)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest


class Instruments:
    """A service's registry with its HTTP request instruments (`<prefix>http_requests`,
    `<prefix>http_request_seconds`); the service adds its own on `self.registry`."""

    def __init__(self, prefix: str, http_buckets: tuple[float, ...]) -> None:
        self.registry = r = CollectorRegistry(auto_describe=False)
        self.http_requests = Counter(
            prefix + "http_requests",
            "HTTP requests by method, route template and status",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_seconds = Histogram(
            prefix + "http_request_seconds",
            "HTTP request time by route template",
            ["method", "route"],
            buckets=http_buckets,
            registry=r,
        )
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, kept; bounded as the label values are."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def http_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.child(self.http_requests, method, route, str(status)).inc()
        self.child(self.http_seconds, method, route).observe(seconds)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


__all__ = ["Instruments"]
