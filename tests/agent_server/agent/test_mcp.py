"""MCP tool servers end to end: real servers (stdio and streamable HTTP) the tests start."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_server.agent.mcp import MCPServers, tool_name
from agent_server.agent.mcp_config import check_config, fill
from tests.conftest import agent_spec, create
from tests.support.api import events, send, tool_names, wait_status
from tests.support.llm import ScriptedLLM, call, text
from tests.support.mcp_servers import HTTPServer, stdio_config
from tests.support.server import ServerProcess
from tests.support.wait import wait_for
from tools.base import ToolContext

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

TOKEN = "tok-0123456789abcdef"
MASK = "<secret-hidden>"


@pytest.fixture(scope="module")
def web() -> Iterator[HTTPServer]:
    server = HTTPServer().start()
    yield server
    server.stop()


def observations(client: httpx.Client, cid: str) -> list[dict[str, Any]]:
    return [e["observation"] for e in events(client, cid, "ObservationEvent")]


def texts(observation: dict[str, Any]) -> list[str]:
    return [c.get("text", "") for c in observation["content"]]


def test_mcp_servers_start_again_after_a_server_restart(
    server: ServerProcess, llm: ScriptedLLM, key: str, tmp_path: Path, web: HTTPServer
) -> None:
    # First in the module: the restarted server is the one the other tests then use warm.
    with server.client() as c:
        conv = create(
            c,
            llm,
            key,
            tmp_path,
            agent={**agent_spec(llm, key), "mcp_config": {"mcpServers": {"web": {"url": web.url}}}},
        )
    server.stop()
    server.start()
    with server.client() as c:
        llm.script(key, call("web_echo", text="after restart"), call("finish", message="ok"))
        send(c, conv["id"], "go")
        assert wait_status(c, conv["id"]) == "finished"
        assert texts(observations(c, conv["id"])[0])[1] == "echo: after restart"
        assert not events(c, conv["id"], "ServerErrorEvent")


def test_http_tools_are_listed_and_called(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, web: HTTPServer
) -> None:
    llm.script(
        key,
        call("web_add", a=2, b=3),
        call("web_header", key="authorization"),
        call("web_sleep", seconds=30),
        call("web_fail", reason="because"),
        call("finish", message="done"),
    )
    # The call timeout is short enough to cut the sleep, long enough for the other calls to
    # answer on a loaded machine.
    mcp_config = {
        "mcpServers": {
            "web": {
                "url": web.url,
                "timeout": 5,
                "headers": {"Authorization": "Bearer ${MCP_TOKEN}"},
            }
        }
    }
    conv = create(
        client,
        llm,
        key,
        tmp_path,
        message="add",
        run=True,
        secrets={"MCP_TOKEN": TOKEN},
        agent={**agent_spec(llm, key), "mcp_config": mcp_config},
    )
    assert wait_status(client, conv["id"]) == "finished"

    prompt = events(client, conv["id"], "SystemPromptEvent")[0]
    titles = {t["title"] for t in prompt["tools"]}
    assert {"web_echo", "web_add", "web_header", "finish", "think"} <= titles
    add = next(t for t in prompt["tools"] if t["title"] == "web_add")
    assert add["action_type"] == "MCPToolAction" and add["observation_type"] == "MCPToolObservation"
    assert set(add["parameters"]["properties"]) >= {"a", "b"}
    assert "web_add" in tool_names(llm.requests_for(key)[0])

    action = events(client, conv["id"], "ActionEvent")[0]
    assert action["tool_name"] == "web_add"
    assert action["action"] == {"kind": "MCPToolAction", "data": {"a": 2, "b": 3}}
    added, header, slow, failed, _ = observations(client, conv["id"])
    assert added["kind"] == "MCPToolObservation" and added["tool_name"] == "web_add"
    assert texts(added) == ["[Tool 'web_add' executed.]", "5"] and not added["is_error"]
    # The server got the filled header; the log (and so the model) only ever has the mask.
    assert texts(header)[1] == f"Bearer {MASK}"
    assert slow["is_error"] and "within 5 s" in texts(slow)[0]
    assert failed["is_error"] and "Error executing tool fail" in texts(failed)[1]
    assert TOKEN not in json.dumps(events(client, conv["id"]))
    assert TOKEN not in json.dumps(llm.requests_for(key))
    assert f"Bearer {MASK}" in json.dumps(llm.requests_for(key)[2]["messages"])


def test_stdio_server_env_secret_crash_and_restart(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "mcp.pid"
    config = stdio_config(API_TOKEN="${STDIO_TOKEN}", MCP_PID_FILE=str(pid_file))
    llm.script(
        key,
        call("local_env", var="API_TOKEN"),
        call("local_image"),
        call("local_crash"),
        call("local_echo", text="still there?"),
        text("the server crashed"),
    )
    conv = create(
        client,
        llm,
        key,
        tmp_path,
        message="go",
        run=True,
        secrets={"STDIO_TOKEN": TOKEN},
        agent={**agent_spec(llm, key), "mcp_config": {"mcpServers": {"local": config}}},
    )
    cid = conv["id"]
    assert wait_status(client, cid) == "finished"
    (
        env,
        image,
        crashed,
        after,
    ) = observations(client, cid)
    assert texts(env) == ["[Tool 'local_env' executed.]", MASK]  # exactly the secret, masked
    assert image["content"][1]["image_urls"][0].startswith("data:image/png;base64,")
    assert crashed["is_error"] and "stopped during the call" in texts(crashed)[0]
    assert after["is_error"] and "not running" in texts(after)[0]
    died = events(client, cid, "ServerErrorEvent")
    assert [e["code"] for e in died] == ["MCPServerDied"] and "'local'" in died[0]["detail"]
    kinds = [e["kind"] for e in events(client, cid)]
    crash_action = [i for i, k in enumerate(kinds) if k == "ActionEvent"][2]
    assert kinds[crash_action + 1 : crash_action + 3] == ["ServerErrorEvent", "ObservationEvent"]
    assert TOKEN not in json.dumps(events(client, cid))

    # The next run starts the server again.
    llm.script(key, call("local_echo", text="back"), call("finish", message="ok"))
    send(client, cid, "again")
    assert wait_status(client, cid) == "finished"
    assert texts(observations(client, cid)[-2])[1] == "echo: back"

    # The server stops with its conversation.
    pid = int(pid_file.read_text())
    assert client.delete(f"/api/conversations/{cid}").status_code == 200
    wait_for(lambda: not _alive(pid), timeout=15, what="the MCP server process to end")


def test_a_server_that_fails_to_start_leaves_the_conversation_usable(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, web: HTTPServer
) -> None:
    broken = {
        "command": sys.executable,
        "args": ["-c", "import sys; sys.stderr.write('no luck today'); sys.exit(1)"],
    }
    missing = {"command": str(tmp_path / "no-such-server")}
    llm.script(key, call("web_echo", text="hi"), call("finish", message="done"))
    conv = create(
        client,
        llm,
        key,
        tmp_path,
        message="go",
        run=True,
        agent={
            **agent_spec(llm, key),
            "mcp_config": {
                "mcpServers": {"broken": broken, "missing": missing, "web": {"url": web.url}}
            },
        },
    )
    cid = conv["id"]
    assert wait_status(client, cid) == "finished"
    kinds = [e["kind"] for e in events(client, cid)]
    assert kinds[:3] == ["SystemPromptEvent", "ServerErrorEvent", "ServerErrorEvent"]
    failures = {e["detail"].split("'")[1]: e for e in events(client, cid, "ServerErrorEvent")}
    assert failures["broken"]["code"] == "MCPServerStartFailed"
    assert "no luck today" in failures["broken"]["detail"]
    assert "FileNotFoundError" in failures["missing"]["detail"]
    titles = {t["title"] for t in events(client, cid, "SystemPromptEvent")[0]["tools"]}
    assert "web_echo" in titles and not any(t.startswith(("broken", "missing")) for t in titles)
    assert texts(observations(client, cid)[0])[1] == "echo: hi"


def test_placeholders_without_a_secret_are_refused(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    body = {
        "agent": {
            **agent_spec(llm, key),
            "mcp_config": {"mcpServers": {"s": {"command": "srv", "env": {"TOKEN": "${NOT_SET}"}}}},
        },
        "workspace": {"working_dir": str(tmp_path)},
        "secrets": {"OTHER": "value-1"},
    }
    r = client.post("/api/conversations", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "agent", "mcp_config", "mcpServers", "s", "env", "TOKEN"]
    assert "NOT_SET" in detail["msg"] and detail["type"] == "missing_secret"

    body["agent"]["mcp_config"] = {"mcpServers": {"s": {"args": ["x"]}}}
    r = client.post("/api/conversations", json=body)
    assert r.status_code == 422 and "command" in r.json()["detail"][0]["msg"]


async def test_a_server_that_never_answers_is_given_up_and_ended(tmp_path: Path) -> None:
    pid_file = tmp_path / "hang.pid"
    script = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    )
    config = {
        "mcpServers": {
            "hang": {"command": sys.executable, "args": ["-c", script], "startup_timeout": 1}
        }
    }
    ctx = ToolContext(conversation_id="c", working_dir=tmp_path, state_dir=tmp_path / "state")

    async def report(event: Any) -> None:
        raise AssertionError(f"nothing died: {event}")

    servers = MCPServers(config, ctx, report)
    started = time.monotonic()
    [error] = await servers.start()
    assert error.code == "MCPServerStartTimeout" and "'hang'" in error.detail
    assert time.monotonic() - started < 10
    assert servers.tools(set()) == []
    assert not _alive(int(pid_file.read_text()))
    await servers.close()


# -- configuration, without servers -----------------------------------------------------------


def test_fill_and_check_config() -> None:
    config = {
        "mcpServers": {
            "a": {
                "url": "https://x/${HOST}/mcp",
                "headers": {"X-Key": "k=${KEY}", "Y": "${KEY}${KEY}"},
            },
            "b": {"command": "srv", "args": ["--token", "${KEY}"]},
        }
    }
    secrets = {"HOST": "example", "KEY": "s3cret"}
    assert check_config(config, secrets) == []
    filled = fill(config, secrets)
    assert filled["mcpServers"]["a"]["url"] == "https://x/example/mcp"
    assert filled["mcpServers"]["a"]["headers"] == {"X-Key": "k=s3cret", "Y": "s3crets3cret"}
    assert filled["mcpServers"]["b"]["args"] == ["--token", "s3cret"]
    missing = check_config(config, {"KEY": "s3cret"})
    assert [(loc, kind) for loc, _, kind in missing] == [
        (["mcpServers", "a", "url"], "missing_secret")
    ]
    assert check_config({}, {}) == [] and check_config({"mcpServers": {}}, {}) == []
    assert check_config({"mcpServers": {"c": {"url": "ftp://x"}}}, {})[0][0] == ["mcpServers", "c"]
    assert check_config({"mcpServers": {"c": {"command": "x", "timeout": -1}}}, {})


def test_tool_names_are_sanitized_and_unique() -> None:
    taken = {"finish"}
    assert tool_name("my server", "do.it/now", taken) == "my_server_do_it_now"
    long = tool_name("s" * 40, "t" * 40, taken)
    assert len(long) == 64
    again = tool_name("s" * 40, "t" * 40, taken)
    assert len(again) == 64 and again != long and again.endswith("_2")
    assert tool_name("a", "b", taken) == "a_b" and tool_name("a", "b", taken) == "a_b_2"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes (its parent may reap it later).
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_literal_values_in_mcp_config_are_not_returned(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    config = {
        "mcpServers": {
            "gone": {
                "command": str(tmp_path / "no-such-server"),
                "env": {"TOKEN": "literal-token-value", "REF": "${REF}"},
            },
            "site": {
                "url": "http://127.0.0.1:9/mcp",
                "headers": {"Authorization": "Bearer literal-header"},
            },
        }
    }
    conv = create(
        client,
        llm,
        key,
        tmp_path,
        secrets={"REF": "referenced-value"},
        agent={**agent_spec(llm, key), "mcp_config": config},
    )
    shown = client.get(f"/api/conversations/{conv['id']}").text
    assert "literal-token-value" not in shown and "literal-header" not in shown
    servers = json.loads(shown)["agent"]["mcp_config"]["mcpServers"]
    assert servers["gone"]["env"] == {"TOKEN": "**********", "REF": "${REF}"}
