"""A real OTLP/HTTP traces receiver on a loopback port: what a collector would be.

    receiver = OTLPReceiver().start()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.base_url}
    spans = receiver.wait_for(lambda spans: any(s.name == "conversation" for s in spans))

Bodies are decoded with the official protocol package (opentelemetry-proto); each request's
raw bytes are kept too, so a test can search everything that left the server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.llm import free_port
from tests.support.threaded import ThreadedServer

PROTOBUF = "application/x-protobuf"


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


@dataclass
class Span:
    """One received span, decoded."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    status_code: int
    status_message: str
    events: list[tuple[str, dict[str, Any]]]
    start_ns: int
    end_ns: int
    service: str
    #: (trace id, span id, attributes) of each span this one links to.
    links: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)


class OTLPReceiver:
    def __init__(self) -> None:
        self.port = free_port()
        self.spans: list[Span] = []
        self.bodies: list[bytes] = []
        self.content_types: list[str] = []
        self._lock = threading.Lock()
        app = Starlette(routes=[Route("/v1/traces", self._traces, methods=["POST"])])
        self._server = ThreadedServer(app, self.port, "otlp-receiver")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> OTLPReceiver:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    async def _traces(self, request: Request) -> Response:
        body = await request.body()
        if request.headers.get("content-type") != PROTOBUF:
            return Response(status_code=415)
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        spans = []
        for resource_spans in export.resource_spans:
            resource = {kv.key: value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    spans.append(
                        Span(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            attributes={kv.key: value(kv.value) for kv in s.attributes},
                            status_code=s.status.code,
                            status_message=s.status.message,
                            events=[
                                (e.name, {kv.key: value(kv.value) for kv in e.attributes})
                                for e in s.events
                            ],
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            service=str(resource.get("service.name", "")),
                            links=[
                                (
                                    link.trace_id.hex(),
                                    link.span_id.hex(),
                                    {kv.key: value(kv.value) for kv in link.attributes},
                                )
                                for link in s.links
                            ],
                        )
                    )
        with self._lock:
            self.bodies.append(body)
            self.content_types.append(request.headers.get("content-type", ""))
            self.spans.extend(spans)
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type=PROTOBUF)

    def received(self) -> list[Span]:
        with self._lock:
            return list(self.spans)

    def wait_for(self, predicate: Callable[[list[Span]], bool], timeout: float = 30) -> list[Span]:
        deadline = time.monotonic() + timeout
        while True:
            spans = self.received()
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                names = sorted({s.name for s in spans})
                raise AssertionError(f"spans not received within {timeout}s; got {names}")
            time.sleep(0.05)
