"""`agent-server acp` against a real control plane (process sandboxes, the scripted LLM), driven
by a scripted editor: sessions start through start tasks, and everything after goes through
the control plane's own routes and its event stream."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from acp import RequestError
from acp.schema import EnvVariable, McpServerStdio

from tests.control_plane.support import (
    ControlPlane,
    agent_sockets,
    configure_llm,
    conversation,
    make_config,
    sandbox_pid,
    wait_for,
)
from tests.support.acp_client import ROOT, editor_process, start, text
from tests.support.llm import ScriptedLLM, call, free_port

pytestmark = pytest.mark.e2e

TOKEN = "mcp-token-0c4b7e21aa"
TOOLS = ["terminal", "file_editor", "task_tracker"]


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    # The editor's MCP server here is a module of this source tree, which an isolated sandbox
    # does not see (it sees the system and the installed agent server: a real editor's server
    # is a system program such as npx or uvx); isolation has its own tests.
    running = ControlPlane(
        make_config(
            tmp_path_factory.mktemp("plane") / "cp", sandbox_isolation="off", shared_host=True
        )
    ).start()
    yield running
    running.stop()


async def account(
    plane: ControlPlane, llm: ScriptedLLM, key: str, **settings: Any
) -> tuple[str, httpx.Client]:
    """A new user of the plane whose settings aim at the scripted LLM under `key`."""
    api_key = await asyncio.to_thread(plane.new_user, f"editor-{key}")
    api = plane.client(api_key)
    configure_llm(api, llm.base_url(key), tools=TOOLS, **settings)
    return api_key, api


def env(plane: ControlPlane, api_key: str, **extra: str) -> dict[str, str]:
    return {"CONTROL_PLANE_URL": plane.url, "CONTROL_PLANE_API_KEY": api_key, **extra}


def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def sandbox(api: httpx.Client, sandbox_id: str) -> dict[str, Any]:
    record: dict[str, Any] = api.get("/api/v1/sandboxes", params={"id": sandbox_id}).json()[0]
    return record


def events(api: httpx.Client, cid: str, kind: str) -> list[dict[str, Any]]:
    r = api.get(f"/api/v1/conversation/{cid}/events/search", params={"kind__eq": kind})
    items: list[dict[str, Any]] = r.json()["items"]
    return items


def running(pattern: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


async def test_a_session_runs_in_a_sandbox_and_its_files_come_back_to_the_editor(
    plane: ControlPlane, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    api_key, api = await account(
        plane, llm, key, llm_stream=True, grouping_strategy="GROUP_BY_NEWEST"
    )
    work = project(tmp_path)
    mcp = McpServerStdio(
        name="tools",
        command=sys.executable,
        args=["-m", "tests.support.mcp_servers", "stdio"],
        env=[
            EnvVariable(name="PYTHONPATH", value=str(ROOT)),
            EnvVariable(name="MCP_TOKEN", value=TOKEN),
        ],
    )
    async with editor_process(env(plane, api_key), work) as editor:
        await start(editor)
        new = await editor.conn.new_session(cwd=str(work), mcp_servers=[mcp])
        sid = new.session_id
        record = conversation(api, sid)
        assert record["sandbox_status"] == "RUNNING"
        sandbox_id, working_dir = record["sandbox_id"], record["working_dir"]
        assert working_dir != str(work)  # the sandbox works in a directory of its own
        # The editor's MCP server became a plugin the sandbox runs.
        [prompt] = await asyncio.to_thread(
            wait_for, lambda: events(api, sid, "SystemPromptEvent"), 30, what="the prompt"
        )
        assert "tools_env" in {t["title"] for t in prompt["tools"]}
        # The bridge follows the stream, so the control plane relays the streamed text.
        await asyncio.to_thread(
            wait_for,
            lambda: agent_sockets(api, sandbox_id) == 1,
            30,
            what="the control plane's socket to the sandbox",
        )

        sandbox_key = sandbox(api, sandbox_id)["session_api_key"]
        llm.script(
            key,
            call("terminal", "Looking at the sandbox first.", command="echo from-the-sandbox"),
            call(
                "file_editor",
                command="create",
                path=f"{working_dir}/src/hello.py",
                file_text="print('hi')\n",
            ),
            # A prompt-injected agent plants a Git hook: it stays in the sandbox.
            call(
                "file_editor",
                command="create",
                path=f"{working_dir}/.git/hooks/post-checkout",
                file_text="#!/bin/sh\ntouch ~/pwned\n",
            ),
            call("tools_env", var="MCP_TOKEN"),
            call(
                "terminal",
                command=f"tr '\\0' '\\n' < /proc/{sandbox_pid(plane, sandbox_id)}/environ"
                " | grep ^SESSION_API_KEY=",
            ),
            call("finish", message="Done here."),
        )
        editor.answers += ["allow"] * 5
        reply = await editor.conn.prompt(session_id=sid, prompt=text("make hello.py"))
        assert reply.stop_reason == "end_turn"
        assert len(editor.permissions) == 5 and editor.answers == []

        chunks = [u for u in editor.of(sid) if type(u).__name__ == "AgentMessageChunk"]
        assert len(chunks) > 2
        assert editor.text(sid) == "Looking at the sandbox first.Done here."
        command, create, hook, mcp_call, snoop = editor.tool_calls(sid).values()
        assert command.status == "completed" and "from-the-sandbox" in command.texts()
        # The file changed in the sandbox is shown, and written, under the editor's directory.
        hello = work / "src" / "hello.py"
        assert create.title == f"Create {hello}" and create.status == "completed"
        [diff] = create.diffs()
        assert (diff.path, diff.old_text, diff.new_text) == (str(hello), None, "print('hi')\n")
        assert editor.writes == [(str(hello), "print('hi')\n")]
        assert hello.read_text() == "print('hi')\n"
        assert hook.status == "completed" and not (work / ".git").exists()
        # Keys: the MCP server's is masked by the sandbox; the sandbox's own is in no
        # environment its agent could read (agent_server.secrecy), and never sent.
        assert "<secret-hidden>" in mcp_call.texts()
        assert "SESSION_API_KEY" not in snoop.texts().replace("grep ^SESSION_API_KEY=", "")
        assert "exit code 1" in snoop.texts()
        sent = editor.sent()
        assert TOKEN not in sent and api_key not in sent and sandbox_key not in sent

        llm.script(key, call("terminal", command="touch rejected.txt"))
        editor.answers.append("reject")
        reply = await editor.conn.prompt(session_id=sid, prompt=text("make rejected.txt"))
        assert reply.stop_reason == "end_turn"
        rejected = list(editor.tool_calls(sid).values())[-1]
        assert rejected.title == "$ touch rejected.txt" and rejected.status == "failed"
        assert conversation(api, sid)["execution_status"] == "idle"
        assert len(events(api, sid, "UserRejectObservation")) == 1

        # Grouping is the user's setting: the newest sandbox takes the next session.
        other = await editor.conn.new_session(cwd=str(work), mcp_servers=[])
        assert conversation(api, other.session_id)["sandbox_id"] == sandbox_id


async def test_cancel_then_load_after_the_bridge_restarted(
    plane: ControlPlane, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    api_key, api = await account(plane, llm, key)
    work = project(tmp_path)
    marker = "sleep 3073"
    llm.script(
        key, call("terminal", "Waiting.", command=f"{marker} && touch late.txt", timeout=600)
    )
    bridge = env(plane, api_key, AGENT_SERVER_ACP_APPROVAL="always-approve")
    async with editor_process(bridge, work) as editor:
        await start(editor)
        sid = (await editor.conn.new_session(cwd=str(work), mcp_servers=[])).session_id
        prompt = asyncio.create_task(
            editor.conn.prompt(session_id=sid, prompt=text("wait a while"))
        )
        await asyncio.to_thread(wait_for, lambda: running(marker), 60, what="the command")
        await editor.conn.cancel(session_id=sid)
        reply = await asyncio.wait_for(prompt, 60)
        assert reply.stop_reason == "cancelled"
        assert conversation(api, sid)["execution_status"] == "paused"
        await asyncio.to_thread(
            wait_for, lambda: not running(marker), 30, what="the command to be killed"
        )

    llm.script(key, call("finish", message="Picked up again."))
    async with editor_process(bridge, work) as editor:
        await start(editor)
        await editor.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        assert editor.user_text(sid) == "wait a while"
        assert editor.text(sid) == "Waiting."
        [command] = editor.tool_calls(sid).values()
        assert command.title == f"$ {marker} && touch late.txt" and command.status == "failed"
        reply = await editor.conn.prompt(session_id=sid, prompt=text("go on"))
        assert reply.stop_reason == "end_turn"
        assert editor.text(sid) == "Waiting.Picked up again."
        assert conversation(api, sid)["execution_status"] == "finished"


async def test_refusals_and_a_dead_control_plane_are_clear_errors(
    plane: ControlPlane, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    work = project(tmp_path)
    async with editor_process(env(plane, "not-an-account-key-31c9"), work) as editor:
        await start(editor)
        with pytest.raises(RequestError) as refused:
            await editor.conn.new_session(cwd=str(work), mcp_servers=[])
        assert refused.value.code == -32000
        assert str(refused.value).startswith("the control plane at http://127.0.0.1:")
        assert "not-an-account-key-31c9" not in editor.sent()

    # A user without an LLM in the settings: the start task fails, and says why.
    bare = await asyncio.to_thread(plane.new_user, f"bare-{key}")
    async with editor_process(env(plane, bare), work) as editor:
        await start(editor)
        with pytest.raises(RequestError) as failed:
            await editor.conn.new_session(cwd=str(work), mcp_servers=[])
        assert str(failed.value).startswith("the control plane could not start the conversation: ")

    port = free_port()
    async with editor_process(
        {"CONTROL_PLANE_URL": f"http://127.0.0.1:{port}", "CONTROL_PLANE_API_KEY": bare}, work
    ) as editor:
        await start(editor)
        with pytest.raises(RequestError) as dead:
            await asyncio.wait_for(editor.conn.new_session(cwd=str(work), mcp_servers=[]), 60)
        assert str(dead.value) == (
            f"cannot reach the control plane at http://127.0.0.1:{port} "
            "(connection refused or no route)"
        )
        assert bare not in editor.sent()
