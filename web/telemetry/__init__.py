"""Telemetry both services share: which tracer provider a configuration gives, where the OTLP
variables say spans go, labels that stay bounded, and what an HTTP request is labelled by.

Each service builds its own spans and instruments on top (`agent_server.telemetry`,
`control_plane.telemetry`); what is here knows neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from opentelemetry import trace

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.sampling import Sampler

#: OTEL_TRACES_SAMPLER's built-in values (the SDK's own names).
TraceSampler = Literal[
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
]

#: What a label reads once it has taken as many distinct values as it may.
OTHER = "other"


def otlp_endpoint(env: Mapping[str, str]) -> str | None:
    """The OTLP/HTTP traces URL the standard variables give (the OpenTelemetry spec's rules):
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces;
    none with OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. The exporter reads the
    other OTEL_EXPORTER_OTLP_* variables (headers, timeout, compression, certificates) itself.
    ValueError for a protocol other than http/protobuf."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporters = {e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")}
    if "otlp" not in exporters:
        return None
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if not endpoint:
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        if not base:
            return None
        endpoint = base.rstrip("/") + "/v1/traces"
    if protocol != "http/protobuf":
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: this server exports over http/protobuf only"
        )
    return endpoint


def sampler(name: str, ratio: float) -> Sampler:
    """The SDK's sampler of that OTEL_TRACES_SAMPLER name and argument (the config checked
    both): given to the provider, so the SDK never reads the variables itself."""
    from opentelemetry.sdk.trace.sampling import (
        ALWAYS_OFF,
        ALWAYS_ON,
        ParentBased,
        TraceIdRatioBased,
    )

    base: Sampler = (
        ALWAYS_OFF
        if name.endswith("always_off")
        else TraceIdRatioBased(ratio)
        if name.endswith("traceidratio")
        else ALWAYS_ON
    )
    return ParentBased(base) if name.startswith("parentbased_") else base


def tracer_provider(
    enabled: bool, endpoint: str | None, sampling: tuple[str, float], service: str
) -> trace.TracerProvider:
    """Off: OpenTelemetry's no-op provider (spans carry the caller's trace and nothing else).
    On without an exporter: spans with ids and nothing recorded (`web.telemetry.ids`). On with
    an endpoint: the SDK's, recording and exporting over OTLP/HTTP as `service`. The SDK is
    imported only when tracing is on: off costs neither its import nor its memory."""
    if not enabled:
        return trace.NoOpTracerProvider()
    if endpoint is None:
        from web.telemetry.ids import IdsTracerProvider

        return IdsTracerProvider(sampler(*sampling))  # nothing would read what is recorded
    from web.telemetry.export import exporting_provider

    return exporting_provider(endpoint, sampler(*sampling), service)


class BoundedLabel:
    """The values one label has taken, at most `limit`; later new values read as `other`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) >= self.limit:
            return OTHER
        self._seen.add(value)
        return value


__all__ = [
    "OTHER",
    "BoundedLabel",
    "TraceSampler",
    "otlp_endpoint",
    "sampler",
    "tracer_provider",
]
