"""`agent-server acp` against a real agent server and the scripted LLM, driven by a scripted
editor (the ACP package's client side) over the command's stdin and stdout."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError
from acp.schema import EnvVariable, McpServerStdio

from tests.conftest import agent_spec, create
from tests.support.acp_client import ROOT, editor_process, start, text
from tests.support.llm import ScriptedLLM, call, free_port
from tests.support.llm import error as failure
from tests.support.llm import text as answer
from tests.support.server import KEY, ServerProcess
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

TOKEN = "mcp-token-5e1d9a77c3"
TOOLS = ["terminal", "file_editor", "task_tracker"]


def agent_file(tmp_path: Path, llm: ScriptedLLM, key: str, **llm_extra: Any) -> Path:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(agent_spec(llm, key, TOOLS, **llm_extra)))
    return path


def env(server: ServerProcess, agent: Path | None = None, **extra: str) -> dict[str, str]:
    out = {"AGENT_SERVER_URL": server.url, "SESSION_API_KEY": KEY, **extra}
    if agent is not None:
        out["AGENT_SERVER_ACP_AGENT_FILE"] = str(agent)
    return out


def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def conversation(server: ServerProcess, cid: str) -> dict[str, Any]:
    with server.client() as c:
        r = c.get(f"/api/conversations/{cid}")
        assert r.status_code == 200, r.text
        data: dict[str, Any] = r.json()
        return data


def search(server: ServerProcess, cid: str, kind: str) -> list[dict[str, Any]]:
    with server.client() as c:
        r = c.get(f"/api/conversations/{cid}/events/search", params={"kind__eq": kind})
        items: list[dict[str, Any]] = r.json()["items"]
        return items


def server_pid(server: ServerProcess) -> int:
    assert server.proc is not None
    return server.proc.pid


def running(pattern: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


async def test_a_prompt_streams_text_runs_a_command_edits_a_file_and_plans(
    server: ServerProcess, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    work = project(tmp_path)
    hello = work / "hello.py"
    llm.script(
        key,
        call("terminal", "I will look around first.", command="echo hello-from-sandbox"),
        call("file_editor", command="create", path=str(hello), file_text="print('hi')\n"),
        call("file_editor", command="str_replace", path=str(hello), old_str="hi", new_str="bye"),
        call(
            "task_tracker",
            command="plan",
            task_list=[
                {"title": "Write hello.py", "status": "done"},
                {"title": "Run it", "status": "in_progress"},
            ],
        ),
        call("tools_env", var="MCP_TOKEN"),
        # A prompt-injected agent reads its server's environment: the key it finds is
        # in the event (the server does not mask its own key), never in the editor.
        call(
            "terminal",
            command=f"tr '\\0' '\\n' < /proc/{server_pid(server)}/environ | grep ^SESSION_API_KEY=",
        ),
        call("finish", message="All done."),
    )
    mcp = McpServerStdio(
        name="tools",
        command=sys.executable,
        args=["-m", "tests.support.mcp_servers", "stdio"],
        env=[
            EnvVariable(name="PYTHONPATH", value=str(ROOT)),
            EnvVariable(name="MCP_TOKEN", value=TOKEN),
        ],
    )
    async with editor_process(
        env(
            server,
            agent_file(tmp_path, llm, key, stream=True),
            AGENT_SERVER_ACP_APPROVAL="always-approve",
        ),
        work,
    ) as editor:
        init = await start(editor)
        assert init.agent_capabilities is not None and init.agent_capabilities.load_session
        new = await editor.conn.new_session(cwd=str(work), mcp_servers=[mcp])
        sid = new.session_id
        assert new.modes is not None and new.modes.current_mode_id == "always-approve"
        info = conversation(server, sid)
        assert info["workspace"]["working_dir"] == str(work)
        assert info["confirmation_policy"]["kind"] == "NeverConfirm"
        # The MCP server's key went as a secret the server fills in (and masks), not as text.
        assert (
            info["agent"]["mcp_config"]["mcpServers"]["tools"]["env"]["MCP_TOKEN"]
            == "${MCP_TOOLS_MCP_TOKEN}"
        )
        assert "MCP_TOOLS_MCP_TOKEN" in info["secret_names"]

        reply = await editor.conn.prompt(session_id=sid, prompt=text("make hello.py"))
        assert reply.stop_reason == "end_turn"

        # The model's text came as it streamed (in pieces), then the finish message.
        chunks = [u for u in editor.of(sid) if type(u).__name__ == "AgentMessageChunk"]
        assert len(chunks) > 2
        assert editor.text(sid).startswith("I will look around first.")
        assert editor.text(sid).endswith("All done.")

        command, create, edit, plan, mcp_call, snoop = editor.tool_calls(sid).values()
        assert (command.kind, command.title, command.status) == (
            "execute",
            "$ echo hello-from-sandbox",
            "completed",
        )
        assert command.statuses == ["in_progress", "completed"]
        assert "hello-from-sandbox" in command.texts()
        assert command.raw_output["exit_code"] == 0

        assert (create.kind, create.title, create.status) == (
            "edit",
            f"Create {hello}",
            "completed",
        )
        [diff] = create.diffs()
        assert (diff.path, diff.old_text, diff.new_text) == (str(hello), None, "print('hi')\n")
        [diff] = edit.diffs()
        assert (diff.path, diff.old_text, diff.new_text) == (
            str(hello),
            "print('hi')\n",
            "print('bye')\n",
        )

        assert plan.kind == "think" and plan.status == "completed"
        [entries] = [p.entries for p in editor.plans(sid)]
        assert [(e.content, e.status) for e in entries] == [
            ("Write hello.py", "completed"),
            ("Run it", "in_progress"),
        ]

        # The MCP tool read its key from its environment: the editor sees the mask only.
        assert mcp_call.status == "completed" and "<secret-hidden>" in mcp_call.texts()
        assert "SESSION_API_KEY=<secret-hidden>" in snoop.texts()
        assert TOKEN not in editor.sent() and KEY not in editor.sent()
        # The sandbox works in the editor's own directory: nothing to write back.
        assert hello.read_text() == "print('bye')\n" and editor.writes == []
        assert editor.permissions == []


async def test_permissions_are_asked_and_answered(
    server: ServerProcess, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    work = project(tmp_path)
    llm.script(
        key,
        call("terminal", command="touch accepted.txt"),
        call("finish", message="made it"),
        call("terminal", command="touch rejected.txt"),
        call("terminal", command="touch always.txt"),
        call("finish", message="again"),
        call("terminal", command="touch unasked.txt"),
        call("finish", message="quiet"),
    )
    async with editor_process(env(server, agent_file(tmp_path, llm, key)), work) as editor:
        await start(editor)
        new = await editor.conn.new_session(cwd=str(work), mcp_servers=[])
        sid = new.session_id
        assert new.modes is not None and new.modes.current_mode_id == "always-ask"
        assert conversation(server, sid)["confirmation_policy"]["kind"] == "AlwaysConfirm"

        editor.answers.append("allow")
        reply = await editor.conn.prompt(session_id=sid, prompt=text("make accepted.txt"))
        assert reply.stop_reason == "end_turn"
        [(_, asked, options)] = editor.permissions
        [accepted] = editor.tool_calls(sid).values()
        assert asked.tool_call_id == accepted.tool_call_id
        assert asked.title == "$ touch accepted.txt" and asked.kind == "execute"
        assert {o.kind for o in options} == {"allow_once", "allow_always", "reject_once"}
        assert accepted.statuses == ["pending", "in_progress", "completed"]
        assert (work / "accepted.txt").exists()

        editor.answers.append("reject")
        reply = await editor.conn.prompt(session_id=sid, prompt=text("make rejected.txt"))
        assert reply.stop_reason == "end_turn"
        rejected = list(editor.tool_calls(sid).values())[-1]
        assert rejected.title == "$ touch rejected.txt" and rejected.status == "failed"
        assert "Rejected" in rejected.texts()
        assert not (work / "rejected.txt").exists()
        assert conversation(server, sid)["execution_status"] == "idle"
        assert len(search(server, sid, "UserRejectObservation")) == 1

        # "Always allow" accepts and stops asking: the mode becomes always-approve.
        editor.answers.append("allow-always")
        reply = await editor.conn.prompt(session_id=sid, prompt=text("make always.txt"))
        assert reply.stop_reason == "end_turn" and (work / "always.txt").exists()
        assert conversation(server, sid)["confirmation_policy"]["kind"] == "NeverConfirm"
        assert any(type(u).__name__ == "CurrentModeUpdate" for u in editor.of(sid))
        asked_before = len(editor.permissions)
        reply = await editor.conn.prompt(session_id=sid, prompt=text("make unasked.txt"))
        assert reply.stop_reason == "end_turn" and (work / "unasked.txt").exists()
        assert len(editor.permissions) == asked_before == 3


async def test_cancel_interrupts_a_running_command(
    server: ServerProcess, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    work = project(tmp_path)
    marker = "sleep 3071"
    llm.script(key, call("terminal", command=f"{marker} && touch late.txt", timeout=600))
    async with editor_process(
        env(server, agent_file(tmp_path, llm, key), AGENT_SERVER_ACP_APPROVAL="always-approve"),
        work,
    ) as editor:
        await start(editor)
        sid = (await editor.conn.new_session(cwd=str(work), mcp_servers=[])).session_id
        prompt = asyncio.create_task(editor.conn.prompt(session_id=sid, prompt=text("wait")))
        await asyncio.to_thread(wait_for, lambda: running(marker), 60, what="the command")
        await editor.conn.cancel(session_id=sid)
        reply = await asyncio.wait_for(prompt, 60)
        assert reply.stop_reason == "cancelled"
        [command] = editor.tool_calls(sid).values()
        assert command.status == "failed"  # cut short: it never completes
        assert conversation(server, sid)["execution_status"] == "paused"
        assert len(search(server, sid, "InterruptEvent")) == 1
        await asyncio.to_thread(
            wait_for, lambda: not running(marker), 30, what="the command to be killed"
        )
        assert not (work / "late.txt").exists()


async def test_a_session_is_loaded_again_after_the_bridge_restarted(
    server: ServerProcess, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    work = project(tmp_path)
    # No agent file: the server's stored settings choose the agent (text not streamed).
    with server.client() as c:
        r = c.patch("/api/settings", json={"agent": agent_spec(llm, key, TOOLS)})
        assert r.status_code == 200, r.text
    llm.script(
        key,
        call("terminal", "Running it.", command="echo first-output"),
        call("finish", message="First done."),
        call("terminal", command="echo second-output"),
        call("finish", message="Second done."),
    )
    bridge = env(server, AGENT_SERVER_ACP_APPROVAL="always-approve")
    async with editor_process(bridge, work) as editor:
        await start(editor)
        sid = (await editor.conn.new_session(cwd=str(work), mcp_servers=[])).session_id
        reply = await editor.conn.prompt(session_id=sid, prompt=text("the first prompt"))
        assert reply.stop_reason == "end_turn"
        first = editor.tool_calls(sid)

    async with editor_process(bridge, work) as editor:
        await start(editor)
        loaded = await editor.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        assert loaded.modes is not None and loaded.modes.current_mode_id == "always-approve"
        # The history came back as updates before the answer: the prompt, the text, the call.
        assert editor.user_text(sid) == "the first prompt"
        assert editor.text(sid) == "Running it.First done."
        [replayed] = editor.tool_calls(sid).values()
        assert replayed.tool_call_id in first and replayed.status == "completed"
        assert replayed.title == "$ echo first-output" and "first-output" in replayed.texts()

        reply = await editor.conn.prompt(session_id=sid, prompt=text("the second prompt"))
        assert reply.stop_reason == "end_turn"
        assert editor.text(sid).endswith("Second done.")
        assert "second-output" in list(editor.tool_calls(sid).values())[-1].texts()
        assert editor.user_text(sid) == "the first prompt"  # the editor shows its own prompt

        with pytest.raises(RequestError) as unknown:
            await editor.conn.load_session(
                cwd=str(work), mcp_servers=[], session_id="6d3f8a0e-0000-4000-8000-000000000000"
            )
        assert unknown.value.code == -32002
        with pytest.raises(RequestError) as junk:
            await editor.conn.load_session(cwd=str(work), session_id="../../etc", mcp_servers=[])
        assert junk.value.code == -32002


async def test_a_dead_or_refusing_server_is_a_clear_error(
    server: ServerProcess, tmp_path: Path
) -> None:
    work = project(tmp_path)
    port = free_port()
    nobody = {"AGENT_SERVER_URL": f"http://127.0.0.1:{port}/", "SESSION_API_KEY": KEY}
    async with editor_process(nobody, work) as editor:
        await start(editor)
        with pytest.raises(RequestError) as dead:
            await asyncio.wait_for(editor.conn.new_session(cwd=str(work), mcp_servers=[]), 60)
        assert str(dead.value) == (
            f"cannot reach the agent server at http://127.0.0.1:{port} "
            "(connection refused or no route)"
        )

    wrong = "a-wrong-key-4b1e2f"
    async with editor_process(env(server, SESSION_API_KEY=wrong), work) as editor:
        await start(editor)
        with pytest.raises(RequestError) as refused:
            await editor.conn.new_session(cwd=str(work), mcp_servers=[])
        assert refused.value.code == -32000 and "refused the key (401)" in str(refused.value)
        assert wrong not in editor.sent()


async def test_a_server_that_dies_mid_prompt_ends_the_prompt_with_an_error(
    llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    work = project(tmp_path)
    own = ServerProcess(tmp_path / "state").start()
    hold = threading.Event()
    llm.script(key, answer("Thinking about it for a long while", hold=hold, hold_after=8))
    try:
        async with editor_process(
            env(
                own,
                agent_file(tmp_path, llm, key, stream=True),
                AGENT_SERVER_ACP_RECONNECT_TIMEOUT="1",
            ),
            work,
        ) as editor:
            await start(editor)
            sid = (await editor.conn.new_session(cwd=str(work), mcp_servers=[])).session_id
            prompt = asyncio.create_task(editor.conn.prompt(session_id=sid, prompt=text("go")))
            await editor.wait(lambda: editor.text(sid), what="the first streamed text")
            own.kill()
            with pytest.raises(RequestError) as lost:
                await asyncio.wait_for(prompt, 60)
            assert "the agent server at http://127.0.0.1" in str(lost.value)
            assert "gave up after 1 s" in str(lost.value)
            assert KEY not in editor.sent()
    finally:
        hold.set()
        own.stop()


def test_the_command_refuses_a_configuration_without_a_key(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli", "acp", "--agent-server", "http://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "needs its session key: set SESSION_API_KEY" in done.stderr


async def test_a_blocked_prompt_is_a_refusal_and_a_failed_run_says_why(
    server: ServerProcess, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    work = project(tmp_path)
    # A conversation made elsewhere, whose hook refuses every prompt: loaded, then prompted.
    with server.client() as c:
        refuse = {"type": "command", "command": "echo no prompts >&2; exit 2"}
        made = create(
            c,
            llm,
            key,
            work,
            hook_config={"UserPromptSubmit": [{"matcher": "*", "hooks": [refuse]}]},
        )
    async with editor_process(env(server, agent_file(tmp_path, llm, key)), work) as editor:
        await start(editor)
        await editor.conn.load_session(cwd=str(work), session_id=made["id"], mcp_servers=[])
        reply = await editor.conn.prompt(session_id=made["id"], prompt=text("hello"))
        assert reply.stop_reason == "refusal"
        assert "A UserPromptSubmit hook blocked this" in editor.thoughts(made["id"])

        # The model's server refuses the request: the run ends in ERROR, shown as the agent's text.
        llm.script(key, failure(400, "the model refused the request"))
        sid = (await editor.conn.new_session(cwd=str(work), mcp_servers=[])).session_id
        reply = await editor.conn.prompt(session_id=sid, prompt=text("hello"))
        assert reply.stop_reason == "end_turn"
        assert conversation(server, sid)["execution_status"] == "error"
        assert "**Error** (" in editor.text(sid)
