"""Observability in-process: SPEC 2.5's fields (422 for each bad shape, kept across a restart),
GET /metrics and its key, the OTLP and sampler settings, tracing on without an exporter, the
JSON log format and bounded labels."""

from __future__ import annotations

import json
import logging
import re
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanContext
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from agent_server.agent.model import Scripted, ScriptedModel
from agent_server.config import ConfigError, from_env, otlp_traces_endpoint
from agent_server.record import CreateConversation
from agent_server.telemetry import logs
from agent_server.telemetry.logs import JsonFormatter
from control_plane.start_request import StartRequest
from tests.support.inprocess import KEY, app_client, create_body, run_ends, serve
from web.telemetry import OTHER, BoundedLabel

AGENT = {"llm": {"model": "m"}}

#: Each shape SPEC 2.5 refuses, with the key the error must name.
BAD_METADATA: list[tuple[str, Any]] = [
    ("nested object", {"a": {"b": 1}}),
    ("null", {"a": None}),
    ("mixed array", {"a": [1, "x"]}),
    ("booleans and numbers", {"a": [True, 1]}),
    ("array of objects", {"a": [{"b": 1}]}),
    ("array of arrays", {"a": [[1]]}),
    ("array with a null", {"a": ["x", None]}),
    ("long text", {"a": "x" * 1001}),
    ("long array", {"a": list(range(101))}),
    ("long text in an array", {"a": ["x" * 201]}),
    ("integer past int64", {"a": 2**63}),
    ("integer past int64 in an array", {"a": [1, -(2**63) - 1]}),
]


@pytest.mark.parametrize(("shape", "metadata"), BAD_METADATA, ids=[b[0] for b in BAD_METADATA])
def test_each_bad_metadata_shape_is_a_422(tmp_path: Path, shape: str, metadata: Any) -> None:
    with app_client(tmp_path) as client:
        r = client.post(
            "/api/conversations", json={"agent": AGENT, "observability_metadata": metadata}
        )
        assert r.status_code == 422, r.text
        (error,) = r.json()["detail"]  # one clear error, not one per form the value might take
        assert error["loc"][:3] == ["body", "observability_metadata", "a"]
        assert client.get("/api/conversations/count").json() == 0


@pytest.mark.parametrize(
    "body",
    [
        {"observability_metadata": {f"k{i}": i for i in range(101)}},
        {"observability_metadata": {"": 1}},
        {"observability_metadata": {"k" * 129: 1}},
        {"observability_metadata": {"a\nb": 1}},
        {"observability_metadata": [1]},
        {"observability_span_name": "has spaces in it"},
        {"observability_span_name": ""},
        {"observability_span_name": "x" * 129},
        {"observability_tags": [""]},
        {"observability_tags": ["t"] * 51},
        {"observability_tags": "a string"},
        {"observability_tags": [1]},
    ],
    ids=lambda b: json.dumps(b)[:60],
)
def test_bounds_and_types_of_the_fields(tmp_path: Path, body: dict[str, Any]) -> None:
    with app_client(tmp_path) as client:
        r = client.post("/api/conversations", json={"agent": AGENT, **body})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"][1] == next(iter(body))


def test_the_control_plane_validates_the_same_way() -> None:
    """The start request (SPEC 2.5) and the agent server's creation request share the rules."""
    for _, metadata in BAD_METADATA:
        for model in (CreateConversation, StartRequest):
            with pytest.raises(ValidationError):
                model.model_validate({"observability_metadata": metadata})
    good = {
        "observability_span_name": "nightly.review",
        "observability_tags": ["a b", "c"],
        "observability_metadata": {
            "s": "x",
            "n": 1,
            "f": 2.5,
            "b": False,
            "ss": ["a"],
            "ns": [1, 2.5],
            "bs": [True],
            "empty": [],
        },
    }
    assert (
        CreateConversation.model_validate(good).model_dump(include=set(good))
        == StartRequest.model_validate(good).model_dump(include=set(good))
        == good
    )


def test_the_fields_are_stored_shown_and_kept_across_a_restart(tmp_path: Path) -> None:
    fields = {
        "observability_span_name": "nightly.review",
        "observability_tags": ["t1"],
        "observability_metadata": {"team": "core", "ids": [1, 2], "ok": True},
    }
    with app_client(tmp_path) as client:
        r = client.post("/api/conversations", json={"agent": AGENT, **fields})
        assert r.status_code == 201, r.text
        cid = r.json()["id"]
        assert {k: r.json()[k] for k in fields} == fields
        assert r.json()["trace_id"] is None  # tracing off, no caller trace: no trace
    with app_client(tmp_path) as client:
        info = client.get(f"/api/conversations/{cid}").json()
        assert {k: info[k] for k in fields} == fields


def test_metrics_need_the_key_unless_opened(tmp_path: Path) -> None:
    with app_client(tmp_path) as client:
        assert client.get("/metrics", headers={"X-Session-API-Key": "wrong"}).status_code == 401
        r = client.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        families = {f.name: f for f in text_string_to_metric_families(r.text)}
        assert families["agent_server_conversations"].samples == []
        doc = client.get("/openapi.json").json()["paths"]["/metrics"]["get"]
        assert doc["security"] == [{"APIKeyHeader": []}] and "401" in doc["responses"]
    with app_client(tmp_path / "open", metrics_open=True) as client:
        r = client.get("/metrics", headers={"X-Session-API-Key": ""})
        assert r.status_code == 200
        doc = client.get("/openapi.json").json()["paths"]["/metrics"]["get"]
        assert "security" not in doc and "401" not in doc["responses"]
        assert (
            client.get("/api/conversations/count", headers={"X-Session-API-Key": ""}).status_code
            == 401
        )


def test_http_requests_are_counted_by_route_template(tmp_path: Path) -> None:
    with app_client(tmp_path) as client:
        cid = client.post("/api/conversations", json={"agent": AGENT}).json()["id"]
        client.get(f"/api/conversations/{cid}")
        client.get(f"/api/conversations/{cid}", headers={"X-Session-API-Key": "no"})
        client.get("/nowhere/at/all")
        samples = {
            (s.labels["route"], s.labels["status"]): s.value
            for f in text_string_to_metric_families(client.get("/metrics").text)
            if f.name == "agent_server_http_requests"
            for s in f.samples
            if s.name.endswith("_total")
        }
        assert samples[("/api/conversations/{conversation_id}", "200")] == 1
        assert samples[("/api/conversations/{conversation_id}", "401")] == 1
        assert samples[("unmatched", "404")] == 1
        assert not any(cid in route for route, _ in samples)


def test_otlp_endpoint_from_the_standard_variables() -> None:
    assert otlp_traces_endpoint({}) is None
    assert (
        otlp_traces_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"})
        == "http://c:4318/v1/traces"
    )
    assert (
        otlp_traces_endpoint(
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/x",
            }
        )
        == "http://t/x"
    )
    assert (
        otlp_traces_endpoint(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}
        )
        is None
    )
    assert (
        otlp_traces_endpoint(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}
        )
        is None
    )
    with pytest.raises(ConfigError, match="http/protobuf"):
        otlp_traces_endpoint(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
        )
    config = from_env({"SESSION_API_KEY": "k", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert config.tracing_enabled and config.otlp_traces_endpoint == "http://c:4318/v1/traces"
    assert not from_env({"SESSION_API_KEY": "k"}).tracing_enabled
    assert from_env({"SESSION_API_KEY": "k", "AGENT_SERVER_TRACING": "on"}).tracing_enabled
    assert not from_env(
        {
            "SESSION_API_KEY": "k",
            "AGENT_SERVER_TRACING": "off",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        }
    ).tracing_enabled
    assert from_env(
        {
            "SESSION_API_KEY": "k",
            "AGENT_SERVER_LOG_FORMAT": "json",
            "AGENT_SERVER_METRICS_OPEN": "true",
        }
    ).metrics_open


def test_the_sampler_comes_from_the_standard_variables() -> None:
    config = from_env(
        {
            "SESSION_API_KEY": "k",
            "OTEL_TRACES_SAMPLER": "ParentBased_TraceIdRatio",
            "OTEL_TRACES_SAMPLER_ARG": "0.25",
        }
    )
    assert (config.traces_sampler, config.traces_sampler_arg) == ("parentbased_traceidratio", 0.25)
    default = from_env({"SESSION_API_KEY": "k"})
    assert (default.traces_sampler, default.traces_sampler_arg) == ("parentbased_always_on", 1.0)
    for bad in (
        {"OTEL_TRACES_SAMPLER": "sometimes"},
        {"OTEL_TRACES_SAMPLER_ARG": "2"},
        {"OTEL_TRACES_SAMPLER_ARG": "half"},
    ):
        with pytest.raises(ValidationError, match="traces_sampler"):
            from_env({"SESSION_API_KEY": "k", **bad})


class SpanWitness(ScriptedModel):
    """Notes the span current while it is asked (the one a log line written there names),
    and whether it is being recorded then."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.spans: list[tuple[SpanContext, bool]] = []

    async def complete(self, *args: Any, **kw: Any) -> Any:
        span = trace.get_current_span()
        self.spans.append((span.get_span_context(), span.is_recording()))
        return await super().complete(*args, **kw)


async def test_tracing_on_without_an_exporter_gives_ids_and_records_nothing(tmp_path: Path) -> None:
    """Issue 30.9: with tracing on and no exporter the SDK recorded every span (three a step)
    for nothing to read them. What `on` promises is trace ids: a conversation gets a trace of
    its own, or its caller's (with the caller's sampling decision), and its runs a span id, for
    the logs; no span is recorded."""
    caller_trace, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    think = Scripted(calls=[("think", json.dumps({"thought": "t"}))])  # two steps, a tool call
    model = SpanWitness([think])
    async with serve(tmp_path, model, tracing="on") as srv:
        r = await srv.client.post(
            "/api/conversations", json=create_body(tmp_path / "ws", message="hi", run=True)
        )
        assert r.status_code == 201, r.text
        fresh = r.json()["trace_id"]
        assert re.fullmatch(r"[0-9a-f]{32}", fresh)  # no caller trace: one of its own
        await run_ends(srv.conversation(r.json()["id"]))
        r = await srv.client.post(
            "/api/conversations",
            json=create_body(tmp_path / "ws", message="hi", run=True),
            headers={"traceparent": f"00-{caller_trace}-{caller_span}-00"},
        )
        assert r.status_code == 201, r.text
        assert r.json()["trace_id"] == caller_trace
        joined = srv.conversation(r.json()["id"])
        await run_ends(joined)
        assert joined.record.trace is not None and not joined.record.trace.sampled
        info = (await srv.client.get(f"/api/conversations/{joined.id}")).json()
        assert info["trace_id"] == caller_trace
    asked = [context for context, _ in model.spans]
    assert len(asked) == 3  # two steps, then one
    assert not any(recording for _, recording in model.spans)
    assert [format(c.trace_id, "032x") for c in asked] == [fresh, fresh, caller_trace]
    assert all(c.is_valid for c in asked) and format(asked[2].span_id, "016x") != caller_span
    assert [c.trace_flags.sampled for c in asked] == [True, True, False]


def test_a_json_log_line_carries_conversation_and_trace_and_escapes_client_text() -> None:
    tracer = TracerProvider(shutdown_on_exit=False).get_tracer("t")
    formatter = JsonFormatter()
    with logs.conversation("c-1"), tracer.start_as_current_span("s") as span:
        try:
            raise ValueError("boom")
        except ValueError:
            record = logging.LogRecord(
                "agent_server.x",
                logging.ERROR,
                __file__,
                1,
                "GET %s",
                ('/p\n{"forged": 1}\x1b[2J\u2028',),
                sys.exc_info(),
            )
        line = formatter.format(record)
    assert "\n" not in line and "\x1b" not in line and "\u2028" not in line
    data = json.loads(line)
    assert data["message"] == 'GET /p\n{"forged": 1}\x1b[2J\u2028'
    assert data["conversation_id"] == "c-1" and data["level"] == "ERROR"
    assert data["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert data["logger"] == "agent_server.x" and data["time"].endswith("Z")
    assert "ValueError: boom" in data["exception"]
    outside = json.loads(
        formatter.format(logging.LogRecord("x", logging.INFO, "", 1, "m", (), None))
    )
    assert outside["conversation_id"] is None and outside["trace_id"] is None
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_label_values_are_bounded() -> None:
    label = BoundedLabel(2)
    assert [label(v) for v in ("a", "b", "c", "a", "d")] == ["a", "b", OTHER, "a", OTHER]


def test_a_scrape_without_key_is_refused_with_the_spec_detail(tmp_path: Path) -> None:
    with app_client(tmp_path) as client:
        r = client.get("/metrics", headers={"X-Session-API-Key": ""})
        assert r.status_code == 401 and "X-Session-API-Key" in r.json()["detail"]
        assert KEY not in r.text
