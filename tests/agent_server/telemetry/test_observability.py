"""Observability end to end: a real server exporting spans over OTLP/HTTP to a receiver that
decodes them with the official protocol package, /metrics scraped and parsed with the
Prometheus client's parser, and the JSON log lines, after a real conversation (litellm
against the scripted LLM, a real terminal)."""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import agent_spec
from tests.support.api import send, wait_status
from tests.support.llm import ScriptedLLM, call, error, text
from tests.support.otlp import OTLPReceiver, Span
from tests.support.server import KEY, ServerProcess

pytestmark = pytest.mark.e2e

SECRET = "tok-" + secrets.token_hex(8)
LLM_KEY = "sk-llm-" + secrets.token_hex(8)
TRACE_ID = secrets.token_hex(16)
CALLER_SPAN = secrets.token_hex(8)
USAGE = {"prompt_tokens": 321, "completion_tokens": 17, "total_tokens": 338}


@pytest.fixture(scope="module")
def receiver() -> Iterator[OTLPReceiver]:
    r = OTLPReceiver().start()
    yield r
    r.stop()


def metrics(client: httpx.Client) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Sample name -> labels -> value, from a scrape parsed by prometheus_client's parser."""
    r = client.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def children(spans: list[Span], parent: Span, name: str | None = None) -> list[Span]:
    return [
        s for s in spans if s.parent_span_id == parent.span_id and (name is None or s.name == name)
    ]


def one(spans: list[Span], name: str) -> Span:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def test_a_conversation_is_traced_measured_and_logged(
    tmp_path: Path, llm: ScriptedLLM, receiver: OTLPReceiver, key: str
) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.base_url,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "AGENT_SERVER_LOG_FORMAT": "json",
    }
    server = ServerProcess(tmp_path / "state", env=env).start()
    llm.script(
        key,
        error(503, "overloaded", retry_after=0),  # retried once by the server
        call("terminal", command="echo $DEPLOY_TOKEN"),
        text("All done.", usage=USAGE),
    )
    body = {
        "agent": {
            **agent_spec(llm, key, ["terminal"]),
            "llm": {**agent_spec(llm, key)["llm"], "api_key": LLM_KEY},
        },
        "workspace": {"working_dir": str(tmp_path / "ws")},
        "secrets": {"DEPLOY_TOKEN": SECRET},
        "observability_span_name": "nightly.review",
        "observability_tags": ["team-a", f"leaky {SECRET}"],
        "observability_metadata": {
            "team": "core",
            "ids": [1, 2],
            "ratios": [1, 2.5],
            "flags": [True, False],
            "leak": f"x{SECRET}x",
            "n": 3,
        },
        "initial_message": {"content": [{"text": f"print the token, it is {SECRET}"}], "run": True},
    }
    try:
        with server.client() as client:
            r = client.post(
                "/api/conversations",
                json=body,
                headers={"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"},
            )
            assert r.status_code == 201, r.text
            created = r.json()
            cid = created["id"]
            assert created["trace_id"] == TRACE_ID  # the caller's trace is continued
            assert created["observability_span_name"] == "nightly.review"
            assert wait_status(client, cid, timeout=60) == "finished"

            # -- metrics, parsed with the client library's parser -------------------------
            assert httpx.get(server.url + "/metrics").status_code == 401
            m = metrics(client)
            assert m["agent_server_steps_total"][()] >= 2
            assert (
                m["agent_server_tool_calls_total"][(("outcome", "ok"), ("tool", "terminal"))] == 1
            )
            tokens = m["agent_server_llm_tokens_total"]
            assert (
                tokens[(("model", "openai/test-model"), ("type", "output"))]
                >= USAGE["completion_tokens"]
            )
            assert (
                tokens[(("model", "openai/test-model"), ("type", "input"))]
                >= USAGE["prompt_tokens"]
            )
            assert (
                m["agent_server_llm_calls_total"][
                    (("model", "openai/test-model"), ("outcome", "ok"))
                ]
                == 2
            )
            assert m["agent_server_llm_retries_total"][(("model", "openai/test-model"),)] == 1
            assert m["agent_server_conversations"][(("status", "finished"),)] == 1
            assert m["agent_server_event_log_appends_total"][()] > 5
            assert m["agent_server_event_log_fsync_seconds_count"][()] > 0
            assert (
                m["agent_server_http_requests_total"][
                    (("method", "POST"), ("route", "/api/conversations"), ("status", "201"))
                ]
                == 1
            )
            assert (
                m["agent_server_http_requests_total"][
                    (("method", "GET"), ("route", "/metrics"), ("status", "401"))
                ]
                == 1
            )
            assert m["agent_server_websocket_subscribers"][()] == 0
    finally:
        server.stop()  # the root span ends with the conversation's life here, and is flushed

    spans = receiver.wait_for(lambda s: any(x.name == "conversation" for x in s))
    spans = [s for s in spans if s.trace_id == TRACE_ID]
    root = one(spans, "conversation")
    assert root.parent_span_id == CALLER_SPAN and root.service == "agent-server"
    assert root.attributes["gen_ai.conversation.id"] == cid
    assert root.attributes["tags"] == ["team-a", "leaky <secret-hidden>"]
    assert root.attributes["metadata.team"] == "core"
    assert root.attributes["metadata.ids"] == [1, 2]
    assert root.attributes["metadata.ratios"] == [1.0, 2.5]
    assert root.attributes["metadata.flags"] == [True, False]
    assert root.attributes["metadata.n"] == 3
    assert root.attributes["metadata.leak"] == "x<secret-hidden>x"
    named = one(spans, "nightly.review")
    assert named.parent_span_id == root.span_id
    (run,) = children(spans, named, "invoke_agent")
    assert run.attributes["agent_server.run.status"] == "finished"
    steps = children(spans, run, "step")
    assert len(steps) == 2 and all(s.status_code == 0 for s in steps + [run, root])  # unset
    first_llm = children(spans, steps[0], "chat openai/test-model")[0]
    assert first_llm.attributes["gen_ai.system"] == "openai"
    assert first_llm.attributes["gen_ai.request.model"] == "openai/test-model"
    assert first_llm.attributes["gen_ai.operation.name"] == "chat"
    assert first_llm.attributes["agent_server.llm.retries"] == 1
    assert [name for name, _ in first_llm.events] == ["retry"]
    (tool,) = children(spans, steps[0], "execute_tool terminal")
    assert tool.attributes["gen_ai.tool.name"] == "terminal"
    assert tool.attributes["agent_server.tool.outcome"] == "ok"
    assert tool.end_ns > tool.start_ns
    last_llm = children(spans, steps[1], "chat openai/test-model")[0]
    assert last_llm.attributes["gen_ai.usage.input_tokens"] == USAGE["prompt_tokens"]
    assert last_llm.attributes["gen_ai.usage.output_tokens"] == USAGE["completion_tokens"]
    assert "agent_server.llm.cost_usd" in last_llm.attributes
    http = one(spans, "POST /api/conversations")
    assert http.parent_span_id == CALLER_SPAN and http.kind == 2  # SERVER
    assert http.attributes["http.route"] == "/api/conversations"
    assert http.attributes["http.response.status_code"] == 201
    everything = b"".join(receiver.bodies)
    assert SECRET.encode() not in everything and LLM_KEY.encode() not in everything
    assert KEY.encode() not in everything

    # -- JSON logs: one object per line, with the conversation and the trace ---------------
    log = server.log_path.read_text()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert lines and all(
        {"time", "level", "logger", "message", "conversation_id", "trace_id"} <= set(line)
        for line in lines
    )
    access = [
        line
        for line in lines
        if line["logger"] == "agent_server.access" and line["conversation_id"] == cid
    ]
    assert access and all(line["trace_id"] for line in access)
    created_line = [
        line
        for line in lines
        if line["logger"] == "agent_server.access"
        and line["message"].startswith("POST /api/conversations ")
    ]
    assert created_line[0]["trace_id"] == TRACE_ID
    assert SECRET not in log and LLM_KEY not in log

    # -- after a restart: the fields are kept and the next run joins the same trace ---------
    llm.script(key, text("Again done."))
    server.start()
    try:
        with server.client() as client:
            info = client.get(f"/api/conversations/{cid}").json()
            assert info["observability_tags"] == ["team-a", f"leaky {SECRET}"]
            assert info["observability_metadata"]["ratios"] == [1, 2.5]
            assert info["trace_id"] == TRACE_ID
            send(client, cid, "once more")
            assert wait_status(client, cid, "finished", timeout=60) == "finished"
    finally:
        server.stop()
    spans = receiver.wait_for(
        lambda s: len([x for x in s if x.name == "invoke_agent" and x.trace_id == TRACE_ID]) == 2
    )
    runs = [s for s in spans if s.name == "invoke_agent" and s.trace_id == TRACE_ID]
    assert {s.parent_span_id for s in runs} == {named.span_id}


def test_a_forks_trace_links_to_its_sources(
    tmp_path: Path, llm: ScriptedLLM, receiver: OTLPReceiver, key: str
) -> None:
    """Issue 30.6: a fork started a trace of its own with nothing leading back to the source's.
    Its root span now links to the source's root and names the source."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.base_url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    server = ServerProcess(tmp_path / "state", env=env).start()
    try:
        with server.client() as client:
            r = client.post(
                "/api/conversations",
                json={"agent": agent_spec(llm, key), "workspace": {"working_dir": str(tmp_path)}},
            )
            assert r.status_code == 201, r.text
            source = r.json()
            r = client.post(f"/api/conversations/{source['id']}/fork", json={})
            assert r.status_code == 201, r.text
            fork = r.json()
            assert fork["trace_id"] and fork["trace_id"] != source["trace_id"]
            for cid in (fork["id"], source["id"]):  # a root span ends with its conversation
                assert client.delete(f"/api/conversations/{cid}").status_code == 200
        mine = {source["trace_id"], fork["trace_id"]}
        spans = receiver.wait_for(
            lambda got: (
                len([s for s in got if s.name == "conversation" and s.trace_id in mine]) == 2
            )
        )
        roots = {s.trace_id: s for s in spans if s.name == "conversation" and s.trace_id in mine}
        source_root, fork_root = roots[source["trace_id"]], roots[fork["trace_id"]]
        assert fork_root.links == [
            (source_root.trace_id, source_root.span_id, {"agent_server.link": "forked_from"})
        ]
        assert fork_root.attributes["agent_server.forked_from.id"] == source["id"]
        assert source_root.links == []
    finally:
        server.stop()


def test_an_acp_agents_tool_calls_have_spans_and_metrics(
    tmp_path: Path, receiver: OTLPReceiver
) -> None:
    """Issue 30.5: an ACP agent's tool calls had no span and no metric, unlike the loop's."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.base_url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    server = ServerProcess(tmp_path / "state", env=env).start()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("hello\n")
    agent = [sys.executable, str(Path(__file__).parents[2] / "support" / "acp_agent.py")]
    try:
        with server.client() as client:
            r = client.post(
                "/api/conversations",
                json={
                    "agent": {"kind": "ACPAgent", "acp_command": agent},
                    "workspace": {"working_dir": str(ws)},
                    "initial_message": {
                        "content": [{"text": "read notes.txt\nterminal exit 3"}],
                        "run": True,
                    },
                },
            )
            assert r.status_code == 201, r.text
            created = r.json()
            assert wait_status(client, created["id"], timeout=60) == "finished"
            m = metrics(client)
            calls = m["agent_server_tool_calls_total"]
            assert calls[(("outcome", "ok"), ("tool", "read"))] == 1
            assert calls[(("outcome", "error"), ("tool", "execute"))] == 1
            assert m["agent_server_steps_total"][()] == 1
        mine = created["trace_id"]

        def whole(got: list[Span]) -> bool:  # the run's span ends after its tools' spans
            names = [s.name for s in got if s.trace_id == mine]
            return "invoke_agent" in names and sum(n.startswith("execute_tool") for n in names) == 2

        spans = receiver.wait_for(whole)
        run = one([s for s in spans if s.trace_id == mine], "invoke_agent")
        tools = {
            s.name: s for s in spans if s.trace_id == mine and s.name.startswith("execute_tool")
        }
        assert set(tools) == {"execute_tool read", "execute_tool execute"}
        assert {s.parent_span_id for s in tools.values()} == {run.span_id}
        assert tools["execute_tool read"].attributes["agent_server.tool.outcome"] == "ok"
        failed = tools["execute_tool execute"]
        assert failed.attributes["agent_server.tool.outcome"] == "error"
        assert failed.attributes["gen_ai.tool.call.id"] == "call-2"
    finally:
        server.stop()


def test_tracing_off_by_default_and_metrics_open_by_flag(
    tmp_path: Path, llm: ScriptedLLM, receiver: OTLPReceiver
) -> None:
    """Without an OTLP endpoint nothing is exported; --metrics-open lets a scraper in."""
    before = len(receiver.received())
    server = ServerProcess(tmp_path / "state", args=["--metrics-open"]).start()
    try:
        r = httpx.get(server.url + "/metrics", timeout=10)
        assert r.status_code == 200
        names = {f.name for f in text_string_to_metric_families(r.text)}
        assert {
            "agent_server_steps",
            "agent_server_conversations",
            "agent_server_llm_calls",
            "agent_server_http_requests",
        } <= names
        with server.client() as client:
            r = client.post(
                "/api/conversations",
                json={"agent": agent_spec(llm, "off")},
                headers={"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"},
            )
            assert r.status_code == 201
            # No spans are recorded, yet the caller's trace id is kept for the logs.
            assert r.json()["trace_id"] == TRACE_ID
    finally:
        server.stop()
    assert len(receiver.received()) == before
