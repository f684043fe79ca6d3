"""agent_server.conversations: the status table, run control, restart recovery, lifecycle.

Everything runs in-process against the ScriptedModel; races are driven by events (the model's
`asked`/`waiting`, a delayed answer cancelled by interrupt, `Conversation.closed`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from agent_server.agent.model import Scripted, ScriptedModel
from agent_server.conversations import Lifecycle
from agent_server.errors import ConversationGone, InvalidTransition
from agent_server.record import SendMessage
from events import (
    ActionEvent,
    ConversationErrorEvent,
    ConversationStateUpdateEvent,
    InterruptEvent,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    UserRejectObservation,
)
from events.status import TRANSITIONS
from events.status import ExecutionStatus as S
from tests.support.inprocess import (
    GatedModel,
    InProcess,
    events,
    new_conversation,
    run_ends,
    serve,
)
from web.errors import Conflict

THINK = ("think", '{"thought": "thinking"}')
ECHO = ("terminal", '{"command": "echo confirmed-output"}')
ALWAYS = {"confirmation_policy": {"kind": "AlwaysConfirm"}}


def message(text: str, run: bool = True) -> SendMessage:
    return SendMessage.model_validate({"content": [{"type": "text", "text": text}], "run": run})


def status_updates(evs: list[object]) -> list[str]:
    return [
        e.value
        for e in evs
        if isinstance(e, ConversationStateUpdateEvent) and e.key == "execution_status"
    ]


# -- the transition table ---------------------------------------------------------------------

ALLOWED = [(a, b) for a, targets in TRANSITIONS.items() for b in sorted(targets)]
DISALLOWED = [(a, b) for a, b in itertools.product(S, S) if a != b and b not in TRANSITIONS[a]]


def test_the_table_covers_every_status() -> None:
    assert set(TRANSITIONS) == set(S)
    assert all(s not in TRANSITIONS[s] for s in S), "staying put is not a move"


async def test_every_allowed_move_works_and_is_recorded(srv: InProcess, tmp_path: Path) -> None:
    conv = await new_conversation(srv, tmp_path / "ws")
    for current, wanted in ALLOWED:
        conv.record.execution_status = current
        before = len(await events(conv))
        await conv.transition(wanted)
        assert conv.status == wanted
        assert status_updates((await events(conv))[before:]) == [wanted.value]


@pytest.mark.parametrize(("current", "wanted"), DISALLOWED, ids=lambda s: s.value)
async def test_a_disallowed_move_says_what_was_expected(
    srv: InProcess, tmp_path: Path, current: S, wanted: S
) -> None:
    conv = await new_conversation(srv, tmp_path / "ws")
    conv.record.execution_status = current
    before = len(await events(conv))
    with pytest.raises(InvalidTransition) as caught:
        await conv.transition(wanted)
    allowed = sorted(s.value for s in TRANSITIONS[current])
    assert (caught.value.current, caught.value.wanted) == (current.value, wanted.value)
    assert caught.value.allowed == tuple(allowed)
    assert caught.value.detail == (
        f"execution_status cannot go from {current.value} to {wanted.value} "
        f"(from {current.value} it may go to: {', '.join(allowed)})"
    )
    assert caught.value.status_code == 409
    assert conv.status == current
    assert len(await events(conv)) == before


async def test_staying_put_is_no_move(srv: InProcess, tmp_path: Path) -> None:
    conv = await new_conversation(srv, tmp_path / "ws")
    for status in S:
        conv.record.execution_status = status
        before = len(await events(conv))
        await conv.transition(status)
        assert conv.status == status
        assert len(await events(conv)) == before


async def test_the_record_on_disk_holds_a_move_before_its_event_is_out(
    srv: InProcess, tmp_path: Path
) -> None:
    """A client that sees a run end (its status event, or the status it reads) may see the
    server killed a moment later: by then the record on disk holds the move and what the run
    counted (its cost), which a server started again reads back."""
    conv = await new_conversation(srv, tmp_path / "ws")
    on_disk: list[tuple[str, float]] = []

    def when_out(written: Sequence[tuple[object, bytes]]) -> None:
        for event, _ in written:
            if isinstance(event, ConversationStateUpdateEvent) and event.key == "execution_status":
                record = json.loads((conv.directory / "meta.json").read_text())
                on_disk.append((record["execution_status"], record["metrics"]["accumulated_cost"]))

    (await conv.log()).subscribe(when_out)
    await conv.transition(S.RUNNING)
    conv.record.metrics.accumulated_cost = 0.5  # what the run's model calls counted
    await conv.transition(S.FINISHED)
    assert on_disk == [("running", 0.0), ("finished", 0.5)]


# -- run, pause, interrupt ---------------------------------------------------------------------


async def test_a_run_goes_idle_running_finished(
    srv: InProcess, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script += [Scripted(calls=[THINK]), Scripted(content="all done")]
    conv = await new_conversation(srv, tmp_path / "ws")
    assert conv.status == S.IDLE
    await conv.send_message(message("go"))
    await run_ends(conv)
    assert conv.status == S.FINISHED
    assert status_updates(await events(conv)) == ["running", "finished"]
    assert len(model.requests) == 2


async def test_run_while_running_starts_nothing_more(tmp_path: Path) -> None:
    model = GatedModel([Scripted(content="done")])
    async with serve(tmp_path, model) as srv:
        conv = await new_conversation(srv, tmp_path / "ws")
        await conv.send_message(message("go"))
        await model.waiting.wait()
        task = conv._task
        await asyncio.gather(conv.run(), conv.run())
        assert conv._task is task
        model.gate.set()
        await run_ends(conv)
        assert conv.status == S.FINISHED
        assert len(model.requests) == 1
        assert status_updates(await events(conv)) == ["running", "finished"]


async def test_pause_takes_effect_between_steps(tmp_path: Path) -> None:
    model = GatedModel([Scripted(calls=[THINK]), Scripted(calls=[THINK])])
    async with serve(tmp_path, model) as srv:
        conv = await new_conversation(srv, tmp_path / "ws")
        await conv.send_message(message("go"))
        await model.waiting.wait()  # the first step is being asked
        await conv.pause()
        model.gate.set()  # the step ends normally; the next one is not taken
        await run_ends(conv)
        assert conv.status == S.PAUSED
        evs = await events(conv)
        assert len(model.requests) == 1
        assert [type(e) for e in evs].count(PauseEvent) == 1
        assert len([e for e in evs if isinstance(e, ObservationEvent)]) == 1


async def test_interrupt_cancels_the_model_call_at_once(
    srv: InProcess, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script.append(Scripted(content="too late", delay=3600))
    conv = await new_conversation(srv, tmp_path / "ws")
    await conv.send_message(message("go"))
    await model.asked.wait()
    await asyncio.wait_for(conv.interrupt(), 30)  # a 1-hour answer, cancelled
    assert conv.status == S.PAUSED
    assert not conv.running
    evs = await events(conv)
    assert any(isinstance(e, InterruptEvent) for e in evs)
    assert not [e for e in evs if isinstance(e, MessageEvent) and e.source == "agent"]
    assert status_updates(evs) == ["running", "paused"]


# -- confirmation ----------------------------------------------------------------------------


async def waiting_conversation(srv: InProcess, model: ScriptedModel, tmp_path: Path):  # type: ignore[no-untyped-def]
    model.script.append(Scripted(calls=[ECHO]))
    conv = await new_conversation(srv, tmp_path / "ws", tools=["terminal"], **ALWAYS)
    await conv.send_message(message("echo something"))
    await run_ends(conv)
    assert conv.status == S.WAITING_FOR_CONFIRMATION
    assert not await events(conv, ObservationEvent)
    return conv


async def test_accept_runs_the_waiting_action(
    srv: InProcess, model: ScriptedModel, tmp_path: Path
) -> None:
    conv = await waiting_conversation(srv, model, tmp_path)
    model.script.append(Scripted(content="done"))
    await conv.respond(accept=True, reason="")
    await run_ends(conv)
    assert conv.status == S.FINISHED
    [observation] = await events(conv, ObservationEvent)
    assert "confirmed-output" in observation.observation.text


async def test_reject_rests_with_a_rejection(
    srv: InProcess, model: ScriptedModel, tmp_path: Path
) -> None:
    conv = await waiting_conversation(srv, model, tmp_path)
    await conv.respond(accept=False, reason="not that")
    assert conv.status == S.IDLE
    [action] = await events(conv, ActionEvent)
    [rejection] = await events(conv, UserRejectObservation)
    assert (rejection.action_id, rejection.rejection_reason) == (action.id, "not that")
    assert not await events(conv, ObservationEvent)
    assert len(model.requests) == 1


async def test_respond_with_nothing_waiting_is_a_conflict(srv: InProcess, tmp_path: Path) -> None:
    conv = await new_conversation(srv, tmp_path / "ws")
    with pytest.raises(
        Conflict,
        match=r"No action is waiting for confirmation "
        r"\(execution_status is idle\)",
    ):
        await conv.respond(accept=True, reason="")


async def test_a_new_message_rejects_what_waits(
    srv: InProcess, model: ScriptedModel, tmp_path: Path
) -> None:
    conv = await waiting_conversation(srv, model, tmp_path)
    model.script.append(Scripted(content="ok, something else"))
    await conv.send_message(message("do something else instead"))
    await run_ends(conv)
    [rejection] = await events(conv, UserRejectObservation)
    assert rejection.rejection_reason == "superseded by a new user message"
    assert not await events(conv, ObservationEvent)  # the echo never ran
    assert conv.status == S.FINISHED
    assert status_updates(await events(conv)) == [
        "running",
        "waiting_for_confirmation",
        "idle",
        "running",
        "finished",
    ]


async def test_a_plain_run_while_waiting_runs_the_waiting_actions(
    srv: InProcess, model: ScriptedModel, tmp_path: Path
) -> None:
    # Calling run again is how the OpenHands SDK client accepts (its agent server does too).
    conv = await waiting_conversation(srv, model, tmp_path)
    [waiting] = await events(conv, ActionEvent)
    model.script.append(Scripted(content="done"))
    await conv.run()
    await run_ends(conv)
    assert conv.status == S.FINISHED
    [observation] = await events(conv, ObservationEvent)
    assert observation.action_id == waiting.id
    assert len(await events(conv, ActionEvent)) == 1  # the very action that waited, once


# -- restart recovery, deletion, lifecycle ---------------------------------------------------


async def test_a_run_cut_by_a_restart_becomes_an_error(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        conv = await new_conversation(srv, tmp_path / "ws")
        cid = conv.id
        conv.record.execution_status = S.RUNNING  # as a server killed mid-run leaves it
        await conv.save()
    async with serve(tmp_path) as srv:
        conv = srv.conversation(cid)
        assert conv.status == S.ERROR
        [error] = await events(conv, ConversationErrorEvent)
        assert error.code == "RunInterrupted"
        assert status_updates(await events(conv))[-1] == "error"


async def test_shutdown_pauses_a_running_conversation(tmp_path: Path) -> None:
    model = GatedModel([Scripted(content="never")])
    async with serve(tmp_path, model) as srv:
        conv = await new_conversation(srv, tmp_path / "ws")
        cid = conv.id
        await conv.send_message(message("go"))
        await model.waiting.wait()
    assert conv.closed.is_set()
    async with serve(tmp_path) as srv:
        assert srv.conversation(cid).status == S.PAUSED


async def test_delete_closes_the_conversation(
    srv: InProcess, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script.append(Scripted(content="slow", delay=3600))
    conv = await new_conversation(srv, tmp_path / "ws")
    await conv.send_message(message("go"))
    await model.asked.wait()
    waiter = asyncio.create_task(conv.closed.wait())
    assert await srv.services.conversations.delete(conv.record.id)
    await asyncio.wait_for(waiter, 30)
    assert conv.lifecycle is Lifecycle.CLOSED
    assert not conv.running
    assert not conv.directory.exists()
    assert srv.services.conversations.get(conv.record.id) is None
    with pytest.raises(ConversationGone):
        await conv.log()
    assert not await srv.services.conversations.delete(conv.record.id)


async def test_a_closed_conversation_starts_no_run(
    srv: InProcess, model: ScriptedModel, tmp_path: Path
) -> None:
    conv = await new_conversation(srv, tmp_path / "ws")
    assert conv.lifecycle is Lifecycle.OPEN
    await conv.close()
    assert conv.lifecycle is Lifecycle.CLOSED and conv.closed.is_set()
    await conv.run()
    assert not conv.running
    assert not model.requests
    record = conv.directory / "meta.json"
    before = record.read_bytes()
    await conv.save()  # a closed conversation writes nothing
    assert record.read_bytes() == before


class QuotingModel(ScriptedModel):
    """A model whose failure is no LLMFailure and quotes what it was sent (a secret included)."""

    async def complete(
        self, config: object, messages: list[dict[str, object]], *args: object, **kw: object
    ) -> object:
        raise RuntimeError(f"unexpected: {messages[-1]}")


async def test_a_failed_run_is_logged_with_its_secrets_masked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-live-very-secret-4242"
    async with serve(tmp_path, QuotingModel()) as srv:
        conv = await new_conversation(srv, tmp_path, secrets={"TOKEN": secret})
        with caplog.at_level("ERROR", logger="agent_server.conversations"):
            await conv.send_message(message(f"use {secret}"))
            await run_ends(conv)
        assert conv.status is S.ERROR
    failures = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert failures and "RuntimeError" in failures[0]
    assert all(secret not in text for text in failures)
