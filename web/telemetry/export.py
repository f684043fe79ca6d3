"""The SDK's provider when spans are exported: recorded, batched, encoded and sent over
OTLP/HTTP on the batch processor's thread.

Imported only when an exporter is configured: tracing off or on without one never loads the
SDK's exporter.
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import Sampler


class HashedOnce(Resource):
    """A resource whose hash is computed once. The OTLP encoder groups a batch's spans by
    resource and so hashes it for every span, and the SDK's hash is a JSON dump of all its
    attributes each time: as dear as encoding the span itself (issue 30.9). The attributes
    of a resource never change, nor does its hash."""

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource.attributes, resource.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


def exporting_provider(endpoint: str, sampler: Sampler, service: str) -> TracerProvider:
    """`endpoint`: the OTLP/HTTP traces URL; `service`: service.name, unless OTEL_SERVICE_NAME
    or OTEL_RESOURCE_ATTRIBUTES (read by `Resource.create`) say otherwise."""
    provider = TracerProvider(
        sampler=sampler,
        resource=HashedOnce(Resource.create({SERVICE_NAME: service})),
        shutdown_on_exit=False,
    )
    # Headers, timeout, compression and certificates come from the standard
    # OTEL_EXPORTER_OTLP_[TRACES_]* variables, which the exporter reads itself, and the batch's
    # size and schedule from OTEL_BSP_*. Its queue is bounded (2048 spans; beyond, spans are
    # dropped, never waited for).
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


__all__ = ["HashedOnce", "exporting_provider"]
