"""A conversation run by an ACP agent (agent_server.agent.acp), in-process, with the scripted
ACP agent of tests/support/acp_agent.py as the child process."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_server.agent.acp import session as acp_session
from agent_server.conversations import Conversation
from core.masking import MASK
from events import (
    ACPToolCallEvent,
    ConversationErrorEvent,
    ConversationStateUpdateEvent,
    MessageEvent,
    UserRejectObservation,
)
from events.status import ExecutionStatus as S
from tests.support.inprocess import InProcess, events, run_ends

AGENT = [sys.executable, str(Path(__file__).parents[2] / "support" / "acp_agent.py")]
SECRET = "acp-secret-7f3e9b1c5d"


def acp_agent(**extra: Any) -> dict[str, Any]:
    return {"kind": "ACPAgent", "acp_command": AGENT, **extra}


def body(
    workspace: Path, message: str | None = None, run: bool = True, **extra: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "agent": acp_agent(),
        "workspace": {"working_dir": str(workspace)},
        **extra,
    }
    if message is not None:
        out["initial_message"] = {"content": [{"type": "text", "text": message}], "run": run}
    return out


async def create(
    srv: InProcess, workspace: Path, message: str | None = None, **extra: Any
) -> Conversation:
    r = await srv.client.post("/api/conversations", json=body(workspace, message, **extra))
    assert r.status_code == 201, r.text
    return srv.conversation(r.json()["id"])


async def send(client: httpx.AsyncClient, conv: Conversation, text: str, run: bool = True) -> None:
    r = await client.post(
        f"/api/conversations/{conv.id}/events",
        json={"role": "user", "content": [{"type": "text", "text": text}], "run": run},
    )
    assert r.status_code == 200, r.text


async def settled(conv: Conversation, timeout: float = 30) -> S:
    """The status once the run task has ended."""
    await run_ends(conv, timeout)
    return conv.status


async def status_becomes(conv: Conversation, wanted: S, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while conv.status != wanted:
        assert time.monotonic() < deadline, f"status {conv.status}, wanted {wanted}"
        await asyncio.sleep(0.02)


async def calls(conv: Conversation) -> list[ACPToolCallEvent]:
    return await events(conv, ACPToolCallEvent)


async def agent_texts(conv: Conversation) -> list[str]:
    return [
        e.llm_message.content[0].text
        for e in await events(conv, MessageEvent)
        if e.source == "agent"
    ]


# -- a whole conversation -----------------------------------------------------------------------


async def test_a_conversation_streams_text_reads_and_writes_files(
    srv: InProcess, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("line one\nline two\n")
    sub = srv.services.delivery.pubsub.subscribe
    conv = await create(srv, ws)
    frames = sub(conv.id)
    await send(
        srv.client,
        conv,
        "say Hello from ACP\nread notes.txt\nwrite out/new.txt fresh text\nsay Done.",
    )
    assert await settled(conv) == S.FINISHED
    assert (ws / "out" / "new.txt").read_text() == "fresh text"

    assert await agent_texts(conv) == ["Hello from ACP", "Done."]
    read = [c for c in await calls(conv) if c.tool_call_id == "call-1"]
    assert [c.status for c in read] == ["pending", "in_progress", "completed"]
    assert read[-1].tool_kind == "read" and read[-1].title == "Read notes.txt"
    assert read[-1].raw_output == {"content": "line one\nline two\n"}
    assert read[-1].content and read[-1].content[0]["content"]["text"] == "line one\nline two\n"
    write = [c for c in await calls(conv) if c.tool_call_id == "call-2"]
    assert [c.status for c in write] == ["pending", "in_progress", "completed"]
    assert not write[-1].is_error
    assert not await events(conv, ConversationErrorEvent)

    # The text came live as deltas (transient), before the stored message.
    pieces = []
    while len(frames):
        frame = json.loads((await frames.get()).text)
        if frame["kind"] == "StreamingDeltaEvent" and frame["content"]:
            pieces.append(frame["content"])
    assert "".join(pieces) == "Hello from ACPDone."

    # A second message is a second turn of the same agent (only the new message is sent).
    await send(srv.client, conv, "say Second turn")
    assert await settled(conv) == S.FINISHED
    assert (await agent_texts(conv))[-1] == "Second turn"
    r = await srv.client.get(f"/api/conversations/{conv.id}")
    assert r.json()["execution_status"] == "finished"
    assert r.json()["agent"]["kind"] == "ACPAgent"


async def test_reads_and_writes_stay_inside_the_workspace(srv: InProcess, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "outside.txt").write_text("private")
    conv = await create(srv, ws)
    await send(
        srv.client,
        conv,
        f"read {tmp_path / 'outside.txt'}\nread ../outside.txt\nwrite ../escape.txt nope",
    )
    assert await settled(conv) == S.FINISHED
    failed = {c.tool_call_id: c for c in await calls(conv) if c.status == "failed"}
    assert set(failed) == {"call-1", "call-2", "call-3"}
    assert "outside the workspace" in json.dumps(failed["call-1"].raw_output)
    assert "private" not in json.dumps([c.model_dump() for c in await calls(conv)])
    assert not (tmp_path / "escape.txt").exists()  # the write was refused: the turn went on


async def test_a_terminal_runs_in_the_workspace_without_the_server_keys(
    srv: InProcess, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("SESSION_API_KEY", "server-own-key")
    ws = tmp_path / "ws"
    conv = await create(srv, ws)
    await send(srv.client, conv, "terminal pwd; echo key=[$SESSION_API_KEY]")
    assert await settled(conv) == S.FINISHED
    done = (await calls(conv))[-1]
    assert done.status == "completed"
    assert done.raw_output["output"] == f"{os.path.realpath(ws)}\nkey=[]\n"


# -- confirmation -------------------------------------------------------------------------------


async def test_a_permission_request_waits_for_confirmation_and_accept_runs_it(
    srv: InProcess, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    conv = await create(srv, ws, confirmation_policy={"kind": "AlwaysConfirm"})
    await send(srv.client, conv, "say Writing\nwrite a.txt accepted\nsay Written")
    assert await settled(conv) == S.WAITING_FOR_CONFIRMATION
    assert not (ws / "a.txt").exists()
    waiting = (await calls(conv))[-1]
    assert (waiting.tool_call_id, waiting.status, waiting.title) == (
        "call-1",
        "pending",
        "Write a.txt",
    )
    assert await agent_texts(conv) == ["Writing"]

    r = await srv.client.post(
        f"/api/conversations/{conv.id}/events/respond_to_confirmation", json={"accept": True}
    )
    assert r.status_code == 200, r.text
    assert await settled(conv) == S.FINISHED
    assert (ws / "a.txt").read_text() == "accepted"
    assert (await calls(conv))[-1].status == "completed"
    assert await agent_texts(conv) == ["Writing", "Written"]


async def test_permissions_asked_together_all_wait_and_one_accept_answers_them_all(
    srv: InProcess, tmp_path: Path
) -> None:
    """Issue 30.5: a second permission request withdrew the first (cancelled), so the agent's
    first tool call failed although the user accepted."""
    ws = tmp_path / "ws"
    conv = await create(srv, ws, confirmation_policy={"kind": "AlwaysConfirm"})
    await send(srv.client, conv, "writes a.txt,b.txt both\nsay Written")
    assert await settled(conv) == S.WAITING_FOR_CONFIRMATION
    deadline = time.monotonic() + 30
    while len([c for c in await calls(conv) if c.status == "pending"]) < 2:
        assert time.monotonic() < deadline, await calls(conv)
        await asyncio.sleep(0.02)
    assert not [c for c in await calls(conv) if c.status == "failed"]
    r = await srv.client.post(
        f"/api/conversations/{conv.id}/events/respond_to_confirmation", json={"accept": True}
    )
    assert r.status_code == 200, r.text
    assert await settled(conv) == S.FINISHED
    assert (ws / "a.txt").read_text() == "both" and (ws / "b.txt").read_text() == "both"
    last = {c.tool_call_id: c.status for c in await calls(conv)}
    assert last == {"call-1": "completed", "call-2": "completed"}
    assert await agent_texts(conv) == ["Written"]


async def test_the_agents_token_usage_and_cost_reach_the_metrics(
    srv: InProcess, tmp_path: Path
) -> None:
    """Issue 30.5: an ACP agent's own figures (the turn's usage, the session's cumulative cost)
    were dropped: ConversationInfo said 0 tokens and $0 whatever the agent reported."""
    conv = await create(srv, tmp_path / "ws", "say one\nusage 100 20 0.25")
    assert await settled(conv) == S.FINISHED
    await send(srv.client, conv, "say two\nusage 50 5 0.40")
    assert await settled(conv) == S.FINISHED
    await send(srv.client, conv, "say three")  # reports nothing: counts nothing
    assert await settled(conv) == S.FINISHED
    info = (await srv.client.get(f"/api/conversations/{conv.id}")).json()
    metrics = info["metrics"]
    assert metrics["response_count"] == 2 and metrics["accumulated_cost"] == pytest.approx(0.40)
    usage = metrics["accumulated_token_usage"]
    assert (
        usage["prompt_tokens"],
        usage["completion_tokens"],
        usage["cache_read_tokens"],
        usage["context_window"],
    ) == (150, 25, 14, 200_000)
    assert info["stats"]["usage_to_metrics"]["acp-managed"]["accumulated_cost"] == pytest.approx(
        0.40
    )
    stats = [e for e in await events(conv, ConversationStateUpdateEvent) if e.key == "stats"]
    assert [s.value["last_response"]["cost"] for s in stats] == pytest.approx([0.25, 0.15])


async def test_reject_answers_the_agent_and_the_conversation_rests(
    srv: InProcess, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    conv = await create(srv, ws, confirmation_policy={"kind": "AlwaysConfirm"})
    await send(srv.client, conv, "write b.txt refused\nsay not reached")
    assert await settled(conv) == S.WAITING_FOR_CONFIRMATION
    r = await srv.client.post(
        f"/api/conversations/{conv.id}/events/respond_to_confirmation",
        json={"accept": False, "reason": "not that file"},
    )
    assert r.status_code == 200, r.text
    assert conv.status == S.IDLE
    [rejection] = await events(conv, UserRejectObservation)
    waiting = [c for c in await calls(conv) if c.status == "pending"][-1]
    assert rejection.tool_call_id == "call-1" and rejection.action_id == waiting.id
    assert rejection.rejection_reason == "not that file"
    assert not (ws / "b.txt").exists()

    # The next message is a new turn (the refused one was drained first).
    await send(srv.client, conv, "say after the rejection")
    assert await settled(conv) == S.FINISHED
    assert (await agent_texts(conv))[-1] == "after the rejection"
    assert "not reached" not in await agent_texts(conv)
    assert (await calls(conv))[-1].status == "failed"


async def test_never_confirm_answers_permissions_itself(srv: InProcess, tmp_path: Path) -> None:
    conv = await create(
        srv, tmp_path / "ws", confirmation_policy={"kind": "ConfirmRisky", "confirm_unknown": False}
    )
    await send(srv.client, conv, "write c.txt fine")
    assert await settled(conv) == S.FINISHED
    assert (tmp_path / "ws" / "c.txt").read_text() == "fine"


# -- interrupt, pause, crash ----------------------------------------------------------------------


async def test_interrupt_cancels_the_turn_at_once(srv: InProcess, tmp_path: Path) -> None:
    conv = await create(srv, tmp_path / "ws")
    await send(srv.client, conv, "say Working on it\nread missing.txt\nhang")
    await status_becomes(conv, S.RUNNING)
    deadline = time.monotonic() + 20
    while not [c for c in await calls(conv) if c.status == "failed"]:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    started = time.monotonic()
    r = await srv.client.post(f"/api/conversations/{conv.id}/interrupt")
    assert r.status_code == 200, r.text
    assert time.monotonic() - started < 5
    assert conv.status == S.PAUSED
    assert await agent_texts(conv) == ["Working on it"]

    await send(srv.client, conv, "say resumed")
    assert await settled(conv) == S.FINISHED
    assert (await agent_texts(conv))[-1] == "resumed"


async def test_an_agent_ignoring_cancel_is_replaced(
    srv: InProcess, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(acp_session, "CANCEL_GRACE", 0.5)
    conv = await create(srv, tmp_path / "ws")
    await send(srv.client, conv, "say stuck\nhang-hard")
    deadline = time.monotonic() + 20
    while await agent_texts(conv) == [] and not await _streamed(conv):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    await srv.client.post(f"/api/conversations/{conv.id}/interrupt")
    assert conv.status == S.PAUSED
    await send(srv.client, conv, "say fresh process")
    assert await settled(conv) == S.FINISHED
    assert (await agent_texts(conv))[-1] == "fresh process"


async def _streamed(conv: Conversation) -> bool:
    session = conv.session
    assert isinstance(session, acp_session.ACPSession)
    return session.message.started


async def test_pause_takes_effect_at_the_end_of_the_turn(srv: InProcess, tmp_path: Path) -> None:
    conv = await create(srv, tmp_path / "ws")
    await send(srv.client, conv, "say one\nsleep 1\nsay two")
    deadline = time.monotonic() + 20
    while not await _streamed(conv):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    r = await srv.client.post(f"/api/conversations/{conv.id}/pause")
    assert r.status_code == 200, r.text
    await send(srv.client, conv, "say not before a run", run=False)
    assert conv.status == S.RUNNING  # the turn goes on
    assert await settled(conv) == S.PAUSED
    assert await agent_texts(conv) == ["onetwo"]  # the message written meanwhile waits
    await srv.client.post(f"/api/conversations/{conv.id}/run")
    assert await settled(conv) == S.FINISHED
    assert (await agent_texts(conv))[-1] == "not before a run"


async def test_a_crash_is_an_error_with_exit_status_and_masked_stderr(
    srv: InProcess, tmp_path: Path
) -> None:
    conv = await create(srv, tmp_path / "ws", secrets={"ACP_TEST_SECRET": SECRET})
    await send(srv.client, conv, "say about to fail\ncrash 3")
    assert await settled(conv) == S.ERROR
    [error] = await events(conv, ConversationErrorEvent)
    assert error.code == "ACPAgentExited"
    assert "exit status 3" in error.detail
    assert f"fatal: cannot go on with key {MASK}" in error.detail
    assert SECRET not in error.detail
    assert "noise line 29" in error.detail and "noise line 5\n" not in error.detail
    assert await agent_texts(conv) == ["about to fail"]

    # The next run starts the agent again.
    await send(srv.client, conv, "say back")
    assert await settled(conv) == S.FINISHED
    assert (await agent_texts(conv))[-1] == "back"


async def test_secrets_reach_the_agent_by_environment_and_are_masked_in_tool_calls(
    srv: InProcess, tmp_path: Path
) -> None:
    conv = await create(srv, tmp_path / "ws", secrets={"ACP_TEST_SECRET": SECRET})
    await send(srv.client, conv, "env ACP_TEST_SECRET")
    assert await settled(conv) == S.FINISHED
    done = (await calls(conv))[-1]
    assert done.raw_output == {"stdout": MASK}
    assert done.raw_input == {"command": f"echo {MASK}"}
    assert done.content and MASK in json.dumps(done.content)
    r = await srv.client.get(f"/api/conversations/{conv.id}/events/search")
    assert SECRET not in r.text and MASK in r.text


async def test_acp_env_fills_placeholders_and_is_masked_in_responses(
    srv: InProcess, tmp_path: Path
) -> None:
    agent = acp_agent(acp_env={"FROM_SECRET": "${TOKEN}", "PLAIN": "visible-value"})
    r = await srv.client.post(
        "/api/conversations",
        json={
            "agent": agent,
            "workspace": {"working_dir": str(tmp_path / "ws")},
            "secrets": {"TOKEN": SECRET},
        },
    )
    assert r.status_code == 201, r.text
    assert r.json()["agent"]["acp_env"] == {"FROM_SECRET": "${TOKEN}", "PLAIN": "**********"}
    conv = srv.conversation(r.json()["id"])
    await send(srv.client, conv, "env FROM_SECRET\nenv PLAIN\nterminal echo $PLAIN | rev")
    assert await settled(conv) == S.FINISHED
    outputs = [c.raw_output for c in await calls(conv) if c.status == "completed"]
    # Both reached the agent; a literal value, hidden in responses, is masked in events too.
    assert outputs[:2] == [{"stdout": MASK}, {"stdout": MASK}]
    assert outputs[2]["output"] == "eulav-elbisiv\n"


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize(
    "command, status",
    [(["true"], "exit status 0"), (["sh", "-c", "echo gone >&2; exit 3"], "exit status 3")],
)
def test_an_agent_that_exits_at_once_is_reported_with_its_exit_status(
    tmp_path: Path, monkeypatch: Any, command: list[str], status: str, loop: str
) -> None:
    """On uvloop (the server's loop once), a request written to an agent that is gone raised
    RuntimeError ("unable to perform operation on <WriteUnixTransport closed=True...>"),
    which ended the run as an internal error; the server now runs on asyncio's own loop, and
    either is held to the same. The agent exits here before the first request is written,
    and the end of its stdout is read only after (the order the race took)."""
    import uvloop

    from agent_server.agent.acp.process import AgentProcess
    from tests.support.inprocess import serve

    start = AgentProcess.start.__func__  # type: ignore[attr-defined]

    async def start_and_exit(cls: type[AgentProcess], *args: Any, **kw: Any) -> AgentProcess:
        proc = await start(cls, *args, **kw)
        await proc.proc.wait()
        await asyncio.gather(*proc._pumps)
        proc.reader = asyncio.StreamReader()  # its end not read yet
        return proc

    monkeypatch.setattr(AgentProcess, "start", classmethod(start_and_exit))

    async def scenario() -> None:
        async with serve(tmp_path) as srv:
            r = await srv.client.post(
                "/api/conversations",
                json={
                    "agent": {"kind": "ACPAgent", "acp_command": command},
                    "workspace": {"working_dir": str(tmp_path / "ws")},
                },
            )
            assert r.status_code == 201, r.text
            conv = srv.conversation(r.json()["id"])
            await send(srv.client, conv, "go")
            assert await settled(conv) == S.ERROR
            [error] = await events(conv, ConversationErrorEvent)
            assert error.code == "ACPAgentExited", error
            assert error.detail.startswith(
                f"The ACP agent ({command[0]}) stopped while starting: {status}."
            )
            assert "Transport" not in error.detail

    (uvloop.run if loop == "uvloop" else asyncio.run)(scenario())


async def test_a_literal_acp_env_value_printed_by_the_agent_reaches_no_event(
    tmp_path: Path,
) -> None:
    """The issue's repro: a literal acp_env value (redacted in responses) that the agent
    prints on stderr before it exits is masked in the crash report, wherever it goes: the
    log (search), a socket, the webhook."""
    from tests.support.inprocess import KEY, serve
    from tests.support.receiver import Receiver

    value = "literal-value-123"
    receiver = Receiver(api_key=KEY).start()
    try:
        async with serve(
            tmp_path, webhook_url=receiver.base_url, delivery={"webhook_batch_ms": 10}
        ) as srv:
            r = await srv.client.post(
                "/api/conversations",
                json={
                    "agent": {
                        "kind": "ACPAgent",
                        "acp_command": ["sh"],
                        "acp_args": ["-c", "echo $MYKEY >&2; exit 3"],
                        "acp_env": {"MYKEY": value},
                    },
                    "workspace": {"working_dir": str(tmp_path / "ws")},
                },
            )
            assert r.status_code == 201, r.text
            conv = srv.conversation(r.json()["id"])
            frames = srv.services.delivery.pubsub.subscribe(conv.id)
            await send(srv.client, conv, "go")
            assert await settled(conv) == S.ERROR
            r = await srv.client.get(
                f"/api/conversations/{conv.id}/events/search",
                params={"kind__eq": "ConversationErrorEvent"},
            )
            [error] = r.json()["items"]
            assert error["code"] == "ACPAgentExited"
            assert error["detail"].endswith(f"Last stderr lines:\n{MASK}")
            shown = [(await frames.get()).text for _ in range(len(frames))]
            assert any("ACPAgentExited" in f for f in shown)
            wanted = {e.id for e in await events(conv)}
            await asyncio.to_thread(lambda: _delivered(receiver, conv.id, wanted))
            everything = [
                (await srv.client.get(f"/api/conversations/{conv.id}/events/search")).text,
                *shown,
                *(b.body.decode() for b in receiver.batches),
            ]
            assert all(value not in text for text in everything)
    finally:
        receiver.stop()


def _delivered(receiver: Any, cid: str, wanted: set[str | None]) -> None:
    from tests.support.wait import wait_for

    wait_for(lambda: wanted <= set(receiver.ids(cid)), timeout=20, what="webhook delivery")


async def test_deleting_the_conversation_stops_the_process_tree(
    srv: InProcess, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    conv = await create(srv, tmp_path / "ws")
    await send(srv.client, conv, f"spawn {pidfile}\nhang")
    deadline = time.monotonic() + 20
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    pids = [int(p) for p in pidfile.read_text().split()]
    assert all(_alive(p) for p in pids)
    r = await srv.client.delete(f"/api/conversations/{conv.id}")
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids):
        assert time.monotonic() < deadline, "the agent's processes outlived the conversation"
        await asyncio.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


# -- creation -------------------------------------------------------------------------------------


async def test_creation_checks_the_acp_agent(srv: InProcess, tmp_path: Path) -> None:
    ws = {"working_dir": str(tmp_path / "ws")}
    r = await srv.client.post(
        "/api/conversations",
        json={
            "agent": {"kind": "ACPAgent", "acp_command": ["no-such-acp-agent-xyz"]},
            "workspace": ws,
        },
    )
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "agent", "acp_command", 0]
    r = await srv.client.post(
        "/api/conversations",
        json={"agent": {"kind": "ACPAgent", "acp_command": []}, "workspace": ws},
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "agent", "acp_command"]
    r = await srv.client.post(
        "/api/conversations",
        json={
            "agent": {"kind": "ACPAgent", "acp_command": AGENT, "tools": [{"name": "terminal"}]},
            "workspace": ws,
        },
    )
    assert r.status_code == 422
    assert len(srv.services.conversations) == 0


async def test_an_agent_gone_quiet_ends_the_run_after_the_prompt_timeout(
    srv: InProcess, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(acp_session, "CANCEL_GRACE", 0.5)
    r = await srv.client.post(
        "/api/conversations",
        json={
            "agent": acp_agent(acp_prompt_timeout=0.5),
            "workspace": {"working_dir": str(tmp_path / "ws")},
        },
    )
    conv = srv.conversation(r.json()["id"])
    await send(srv.client, conv, "say quiet now\nhang-hard")
    assert await settled(conv) == S.ERROR
    [error] = await events(conv, ConversationErrorEvent)
    assert error.code == "ACPTimeout"
    await send(srv.client, conv, "say awake")
    assert await settled(conv) == S.FINISHED
    assert await agent_texts(conv) == ["quiet now", "awake"]


async def test_after_a_restart_only_unsent_messages_are_prompted(tmp_path: Path) -> None:
    from tests.support.inprocess import serve

    ws = tmp_path / "ws"
    async with serve(tmp_path) as srv:
        conv = await create(srv, ws)
        await send(srv.client, conv, "say first")
        assert await settled(conv) == S.FINISHED
        await send(srv.client, conv, "say second", run=False)
        cid = conv.id
    async with serve(tmp_path) as srv:
        conv = srv.conversation(cid)
        r = await srv.client.post(f"/api/conversations/{cid}/run")
        assert r.status_code == 200, r.text
        assert await settled(conv) == S.FINISHED
        assert await agent_texts(conv) == ["first", "second"]


async def test_a_turn_ended_for_another_reason_is_an_error(srv: InProcess, tmp_path: Path) -> None:
    conv = await create(srv, tmp_path / "ws")
    await send(srv.client, conv, "say partial\nstop max_tokens")
    assert await settled(conv) == S.ERROR
    [error] = await events(conv, ConversationErrorEvent)
    assert (error.code, error.detail) == (
        "ACPStopReason",
        "The ACP agent ended its turn: max_tokens.",
    )
    assert await agent_texts(conv) == ["partial"]


async def test_side_questions_are_bounded(srv: InProcess, tmp_path: Path) -> None:
    """At most MAX_SIDE_QUESTIONS at once: one more is a 429; those asked end (502) when the
    conversation is deleted."""
    from agent_server.agent.acp.side import MAX_SIDE_QUESTIONS

    conv = await create(srv, tmp_path / "ws")
    url = f"/api/conversations/{conv.id}/ask_agent"
    asked = [
        asyncio.create_task(srv.client.post(url, json={"question": "hang-hard"}))
        for _ in range(MAX_SIDE_QUESTIONS)
    ]
    session = conv.session
    assert isinstance(session, acp_session.ACPSession)
    deadline = time.monotonic() + 30
    while session.sides.asked < MAX_SIDE_QUESTIONS:
        assert time.monotonic() < deadline, "the side questions were not asked"
        await asyncio.sleep(0.02)
    r = await srv.client.post(url, json={"question": "say one too many"})
    assert r.status_code == 429, r.text
    r = await srv.client.delete(f"/api/conversations/{conv.id}")
    assert r.status_code == 200
    assert [r.status_code for r in await asyncio.gather(*asked)] == [502] * MAX_SIDE_QUESTIONS
