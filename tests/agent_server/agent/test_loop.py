"""agent_server.agent.loop: one run of the agent, driven by the in-process ScriptedModel."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agent_server.agent.model import Scripted
from agent_server.agent.sink import EventSink
from agent_server.conversations import Conversation
from agent_server.delivery.pubsub import Frame
from agent_server.record import SendMessage
from core.masking import MASK, Masker
from events import (
    ActionEvent,
    AgentErrorEvent,
    ConversationErrorEvent,
    Event,
    MessageEvent,
    ObservationEvent,
    StreamingDeltaEvent,
)
from events.status import ExecutionStatus as S
from tests.support.inprocess import InProcess, events, new_conversation, run_ends

THINK = ("think", '{"thought": "let me think"}')


async def run(
    srv: InProcess,
    tmp_path: Path,
    *script: Scripted,
    tools: tuple[str, ...] = (),
    text: str = "go",
    **extra: Any,
) -> Conversation:
    """A new conversation whose first message starts a run; returns once the run ended."""
    srv.model.script += script
    conv = await new_conversation(srv, tmp_path / "ws", tools=tools, **extra)
    await conv.send_message(
        SendMessage.model_validate({"content": [{"type": "text", "text": text}], "run": True})
    )
    await run_ends(conv)
    return conv


async def test_a_tool_call_its_observation_then_finish(srv: InProcess, tmp_path: Path) -> None:
    conv = await run(
        srv,
        tmp_path,
        Scripted(content="first a thought", calls=[THINK]),
        Scripted(calls=[("finish", '{"message": "all done"}')]),
    )
    assert conv.status == S.FINISHED
    think, finish = await events(conv, ActionEvent)
    assert (think.tool_name, finish.tool_name) == ("think", "finish")
    assert think.thought[0].text == "first a thought"
    observations = await events(conv, ObservationEvent)
    assert [o.action_id for o in observations] == [think.id, finish.id]
    # The second request carried the first call and its result back to the model.
    second = srv.model.requests[1]
    assert [m["tool_call_id"] for m in second if m["role"] == "tool"] == [think.tool_call_id]


async def test_a_terminal_call_runs_in_the_workspace(srv: InProcess, tmp_path: Path) -> None:
    conv = await run(
        srv,
        tmp_path,
        Scripted(calls=[("terminal", '{"command": "echo hi-from-bash; pwd"}')]),
        tools=("terminal",),
    )
    assert conv.status == S.FINISHED
    [observation] = await events(conv, ObservationEvent)
    assert "hi-from-bash" in observation.observation.text
    assert str(tmp_path / "ws") in observation.observation.text


async def test_invalid_json_arguments_are_an_error_and_the_run_goes_on(
    srv: InProcess, tmp_path: Path
) -> None:
    conv = await run(
        srv, tmp_path, Scripted(calls=[("think", '{"thought": ')]), Scripted(content="recovered")
    )
    [error] = await events(conv, AgentErrorEvent)
    assert error.tool_name == "think"
    assert error.error.startswith("Invalid JSON in the arguments of think:")
    assert len(srv.model.requests) == 2
    assert conv.status == S.FINISHED


async def test_an_unknown_tool_is_an_error_naming_the_available_ones(
    srv: InProcess, tmp_path: Path
) -> None:
    conv = await run(srv, tmp_path, Scripted(calls=[("teleport", "{}")]), Scripted(content="ok"))
    [error] = await events(conv, AgentErrorEvent)
    assert error.error.startswith("Unknown tool 'teleport'. Available tools: ")
    assert "think" in error.error and "finish" in error.error
    assert conv.status == S.FINISHED


async def test_max_iterations_ends_in_error(srv: InProcess, tmp_path: Path) -> None:
    steps = [Scripted(calls=[("think", json.dumps({"thought": f"step {i}"}))]) for i in range(5)]
    conv = await run(srv, tmp_path, *steps, max_iterations=3)
    assert conv.status == S.ERROR
    [error] = await events(conv, ConversationErrorEvent)
    assert error.code == "MaxIterationsReached"
    assert error.detail == "Stopped after 3 iterations (max_iterations)."
    assert len(srv.model.requests) == 3


async def test_the_same_failing_call_three_times_is_stuck(srv: InProcess, tmp_path: Path) -> None:
    same = Scripted(calls=[("teleport", '{"to": "mars"}')])
    conv = await run(srv, tmp_path, same, same, same, Scripted(content="never asked"))
    assert conv.status == S.STUCK
    [error] = await events(conv, ConversationErrorEvent)
    assert error.code == "AgentStuck"
    assert "the same action failed 3 times running" in error.detail
    assert len(srv.model.requests) == 3


async def test_stuck_detection_can_be_turned_off(srv: InProcess, tmp_path: Path) -> None:
    same = Scripted(calls=[("teleport", '{"to": "mars"}')])
    conv = await run(
        srv, tmp_path, same, same, same, Scripted(content="gave up"), stuck_detection=False
    )
    assert conv.status == S.FINISHED
    assert len(await events(conv, AgentErrorEvent)) == 3


async def test_always_confirm_waits_and_executes_nothing(srv: InProcess, tmp_path: Path) -> None:
    marker = tmp_path / "ws" / "made"
    conv = await run(
        srv,
        tmp_path,
        Scripted(calls=[("terminal", json.dumps({"command": f"touch {marker}"}))]),
        tools=("terminal",),
        confirmation_policy={"kind": "AlwaysConfirm"},
    )
    assert conv.status == S.WAITING_FOR_CONFIRMATION
    [action] = await events(conv, ActionEvent)
    assert action.tool_name == "terminal"
    assert not await events(conv, ObservationEvent)
    assert not await events(conv, AgentErrorEvent)
    assert not marker.exists()


async def test_think_never_waits_for_confirmation(srv: InProcess, tmp_path: Path) -> None:
    conv = await run(
        srv, tmp_path, Scripted(calls=[THINK]), confirmation_policy={"kind": "AlwaysConfirm"}
    )
    assert conv.status == S.FINISHED
    assert len(await events(conv, ObservationEvent)) == 1


async def test_an_llm_failure_ends_in_error_with_its_code(srv: InProcess, tmp_path: Path) -> None:
    conv = await run(srv, tmp_path, Scripted(fail="RateLimitError"))
    assert conv.status == S.ERROR
    [error] = await events(conv, ConversationErrorEvent)
    assert (error.code, error.detail) == ("RateLimitError", "scripted failure RateLimitError")


async def test_interrupt_cancels_a_delayed_model_call(srv: InProcess, tmp_path: Path) -> None:
    srv.model.script.append(Scripted(content="an hour late", delay=3600))
    conv = await new_conversation(srv, tmp_path / "ws")
    await conv.send_message(
        SendMessage.model_validate({"content": [{"type": "text", "text": "go"}], "run": True})
    )
    await srv.model.asked.wait()
    await asyncio.wait_for(conv.interrupt(), 30)
    assert conv.status == S.PAUSED
    assert not [e for e in await events(conv, MessageEvent) if e.source == "agent"]
    # The next run asks again and finishes: nothing of the cancelled call remains.
    srv.model.asked.clear()
    await conv.run()
    await run_ends(conv)
    assert conv.status == S.FINISHED
    assert len(srv.model.requests) == 2


async def test_interrupt_repairs_a_tool_call_left_without_a_result(
    srv: InProcess, tmp_path: Path
) -> None:
    srv.model.script.append(Scripted(calls=[("terminal", '{"command": "sleep 3600"}')]))
    conv = await new_conversation(srv, tmp_path / "ws", tools=["terminal"])
    stored = asyncio.Event()
    log = await conv.log()
    log.subscribe(
        lambda written: any(isinstance(e, ActionEvent) for e, _ in written) and stored.set()
    )
    await conv.send_message(
        SendMessage.model_validate({"content": [{"type": "text", "text": "go"}], "run": True})
    )
    await asyncio.wait_for(stored.wait(), 30)
    await asyncio.wait_for(conv.interrupt(), 30)
    assert conv.status == S.PAUSED
    [action] = await events(conv, ActionEvent)
    [error] = await events(conv, AgentErrorEvent)
    assert (error.tool_call_id, error.error) == (
        action.tool_call_id,
        "Interrupted before this call finished.",
    )
    assert not await events(conv, ObservationEvent)
    # The history stays valid: the next request answers the call exactly once.
    await conv.run()
    await run_ends(conv)
    results = [m for m in srv.model.requests[-1] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == [action.tool_call_id]


SECRET = "tok-9f8e7d6c5b4a"


async def test_streamed_deltas_never_show_a_secret_split_between_pieces(
    srv: InProcess, tmp_path: Path
) -> None:
    srv.model.script.append(
        Scripted(content=f"the key is {SECRET}.", deltas=["the key is tok-9f8", "e7d6c5b4a."])
    )
    conv = await new_conversation(srv, tmp_path / "ws", secrets={"API_TOKEN": SECRET})
    sub = srv.services.delivery.pubsub.subscribe(conv.id)
    await conv.send_message(
        SendMessage.model_validate({"content": [{"type": "text", "text": "go"}], "run": True})
    )
    await run_ends(conv)
    frames: list[Frame] = []
    while len(sub):
        frames.append(await sub.get())
    deltas = [json.loads(f.text) for f in frames if f.event_id is None]
    pieces = [d["content"] for d in deltas if d["kind"] == "StreamingDeltaEvent"]
    assert "".join(pieces) == f"the key is {MASK}."
    assert not any("tok-" in p or "9f8" in p for p in pieces)
    [reply] = [e for e in await events(conv, MessageEvent) if e.source == "agent"]
    assert reply.llm_message.content[0].text == f"the key is {MASK}."


def test_the_sink_holds_back_a_possible_secret_start() -> None:
    published: list[Event] = []

    async def no_log() -> Any:
        raise AssertionError("deltas are never stored")

    sink = EventSink(no_log, published.append, Masker({"K": SECRET}))
    stream = sink.deltas()
    stream.feed("abc tok-9", None)
    assert [e.content for e in published] == ["abc "]  # type: ignore[attr-defined]
    stream.feed("f8e7d6c5b4a def", "thinking of tok")
    stream.feed(None, "-nothing")
    stream.flush()
    assert all(isinstance(e, StreamingDeltaEvent) for e in published)
    text = "".join(e.content or "" for e in published)  # type: ignore[attr-defined]
    reasoning = "".join(e.reasoning_content or "" for e in published)  # type: ignore[attr-defined]
    assert text == f"abc {MASK} def"
    assert reasoning == "thinking of tok-nothing"
