"""One trace per start, as an operator's collector receives it (a real OTLP/HTTP receiver):
the start request, the start task and its stages, the provider's calls, and, carried into the
sandbox with W3C trace context, the conversation's first model call in the sandbox's agent
server, all under one trace id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control_plane.support import ControlPlane, configure_llm, make_config, start
from tests.support.llm import ScriptedLLM, call
from tests.support.otlp import OTLPReceiver, Span

pytestmark = pytest.mark.e2e


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    server = OTLPReceiver().start()
    yield server
    server.stop()


@pytest.fixture
def plane(tmp_path: Path, receiver: OTLPReceiver) -> Iterator[ControlPlane]:
    traces = receiver.base_url + "/v1/traces"
    config = make_config(
        tmp_path / "cp",
        otlp_traces_endpoint=traces,
        sandbox_otlp_traces_endpoint=traces,
        # The receiver is on this machine's loopback: sandboxes share its network here.
        sandbox_network="host",
    )
    server = ControlPlane(config).start()
    yield server
    server.stop()


def test_one_trace_from_the_start_request_to_the_first_model_call(
    plane: ControlPlane, llm: ScriptedLLM, key: str, receiver: OTLPReceiver
) -> None:
    client = plane.client(plane.new_user("alice"))
    configure_llm(client, llm.base_url(key))
    llm.script(key, call("finish", message="done"))
    task = start(client, "hello")
    assert task["status"] == "READY", task

    def tree(spans: list[Span]) -> list[Span] | None:
        jobs = [s for s in spans if s.name == "start_task" and s.service == "control-plane"]
        if not jobs:
            return None
        same = [s for s in spans if s.trace_id == jobs[0].trace_id]
        model = [s for s in same if s.service == "agent-server" and s.name.startswith("chat ")]
        return same if model else None

    spans = receiver.wait_for(lambda spans: tree(spans) is not None, timeout=60)
    trace = tree(spans)
    assert trace is not None
    by_id = {s.span_id: s for s in trace}
    names = {s.name for s in trace}
    # The request that asked for the start is the root; the job, its stages and the
    # provider's calls hang under it.
    request = next(s for s in trace if s.name == "POST /api/v1/app-conversations")
    job = next(s for s in trace if s.name == "start_task")
    assert job.parent_span_id == request.span_id
    assert {
        "start_task.stage WAITING_FOR_SANDBOX",
        "start_task.stage STARTING_CONVERSATION",
        "sandbox.create",
    } <= names
    create = next(s for s in trace if s.name == "sandbox.create")
    assert by_id[create.parent_span_id].name.startswith("start_task.stage")
    assert create.attributes["control_plane.provider"] == "process"
    # Inside the sandbox: the conversation, created by the stage that started it.
    conversation_created = next(
        s for s in trace if s.service == "agent-server" and s.name.startswith("POST ")
    )
    assert by_id[conversation_created.parent_span_id].name == (
        "start_task.stage STARTING_CONVERSATION"
    )
    model_call = next(s for s in trace if s.name.startswith("chat "))
    assert model_call.attributes["gen_ai.request.model"] == "openai/test-model"
    # No key, secret or message text in any attribute the control plane sent.
    for s in trace:
        for text in map(str, s.attributes.values()):
            assert "sk-test-key" not in text and "hello" not in text
