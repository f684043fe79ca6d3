"""/api/settings: defaults, deep merge, the masked LLM key, validation, and persistence.

The tests of this module build on each other in file order (one server, one settings file):
each states what it expects to find.
"""

from __future__ import annotations

import json
import stat
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.llm import ScriptedLLM
from tests.support.server import ServerProcess
from tests.support.wait import wait_for

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

MASK = "**********"
SECRET = f"sk-settings-{uuid.uuid4().hex}"
DEFAULTS = {"agent": {"llm": None, "tools": []}, "git_user_name": None, "git_user_email": None}


def has_defaults(settings: dict[str, Any]) -> bool:
    """The fields named here are at their defaults (other fields may exist)."""

    def matches(actual: Any, wanted: Any) -> bool:
        if isinstance(wanted, dict):
            return isinstance(actual, dict) and all(
                matches(actual.get(k), v) for k, v in wanted.items()
            )
        return actual == wanted

    return matches(settings, DEFAULTS)


def settings_file(server: ServerProcess) -> Path:
    return server.state_dir / "settings.json"


def stored(server: ServerProcess) -> dict[str, Any]:
    return json.loads(settings_file(server).read_text())


def patch(client: httpx.Client, changes: Any) -> dict[str, Any]:
    r = client.patch("/api/settings", json=changes)
    assert r.status_code == 200, r.text
    assert SECRET not in r.text
    assert r.json() == client.get("/api/settings").json()
    return r.json()


def test_defaults(client: httpx.Client, server: ServerProcess) -> None:
    r = client.get("/api/settings")
    assert r.status_code == 200
    assert has_defaults(r.json()), r.json()
    assert not settings_file(server).exists()


def test_without_settings_a_request_must_carry_the_agent(
    client: httpx.Client, tmp_path: Path
) -> None:
    r = client.post("/api/conversations", json={"workspace": {"working_dir": str(tmp_path)}})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "agent"]


def test_patch_deep_merges(client: httpx.Client, llm: ScriptedLLM) -> None:
    first = patch(client, {"agent": {"llm": {"model": "openai/first"}}})
    assert first["agent"]["llm"]["model"] == "openai/first"
    second = patch(client, {"agent": {"llm": {"base_url": llm.base_url("settings")}}})
    assert second["agent"]["llm"]["model"] == "openai/first"
    assert second["agent"]["llm"]["base_url"] == llm.base_url("settings")
    third = patch(client, {"git_user_name": "Ada"})
    assert third["agent"]["llm"] == second["agent"]["llm"]
    assert third["git_user_name"] == "Ada"


def test_lists_are_replaced_not_merged(client: httpx.Client) -> None:
    patch(client, {"agent": {"tools": [{"name": "file_editor"}, {"name": "task_tracker"}]}})
    now = patch(client, {"agent": {"tools": [{"name": "task_tracker"}]}})
    assert now["agent"]["tools"] == [{"name": "task_tracker", "params": {}}]


def test_the_api_key_is_masked_and_never_returned(
    client: httpx.Client, server: ServerProcess
) -> None:
    answer = patch(client, {"agent": {"llm": {"api_key": SECRET}}})
    assert answer["agent"]["llm"]["api_key"] == MASK
    assert answer["agent"]["llm"]["model"] == "openai/first"
    r = client.get("/api/settings")
    assert SECRET not in r.text and r.json()["agent"]["llm"]["api_key"] == MASK
    assert stored(server)["agent"]["llm"]["api_key"] == SECRET


def test_the_settings_file_is_private(server: ServerProcess) -> None:
    mode = stat.S_IMODE(settings_file(server).stat().st_mode)
    assert mode == 0o600, oct(mode)


def test_sending_back_the_mask_keeps_the_stored_key(
    client: httpx.Client, server: ServerProcess
) -> None:
    shown = client.get("/api/settings").json()
    assert shown["agent"]["llm"]["api_key"] == MASK
    shown["agent"]["llm"]["temperature"] = 0.5
    answer = patch(client, shown)  # what a settings form sends back after an edit
    assert answer["agent"]["llm"]["temperature"] == 0.5
    assert answer["agent"]["llm"]["api_key"] == MASK
    assert stored(server)["agent"]["llm"]["api_key"] == SECRET
    patch(client, {"agent": {"llm": {"api_key": MASK}}})
    assert stored(server)["agent"]["llm"]["api_key"] == SECRET


def test_a_conversation_from_settings_gets_the_real_key(
    client: httpx.Client, server: ServerProcess, tmp_path: Path
) -> None:
    r = client.post("/api/conversations", json={"workspace": {"working_dir": str(tmp_path)}})
    assert r.status_code == 201, r.text
    made = r.json()
    assert SECRET not in r.text and made["agent"]["llm"]["api_key"] == MASK
    assert made["agent"]["tools"] == [{"name": "task_tracker", "params": {}}]
    meta = server.state_dir / "conversations" / uuid.UUID(made["id"]).hex / "meta.json"
    assert json.loads(meta.read_text())["agent"]["llm"]["api_key"] == SECRET
    assert stat.S_IMODE(meta.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "changes",
    [
        {"agent": {"llm": {"temperature": 5}}},
        {"agent": {"llm": {"model": ""}}},
        {"agent": {"llm": None, "tools": "file_editor"}},
        {"agent": {"tools": [{"params": {}}]}},
        {"agent": "openai/gpt"},
        {"git_user_email": 42},
    ],
    ids=[
        "temperature 5",
        "empty model",
        "tools a string",
        "tool without name",
        "agent a string",
        "email a number",
    ],
)
def test_an_invalid_patch_is_422_and_changes_nothing(
    client: httpx.Client, server: ServerProcess, changes: dict[str, Any]
) -> None:
    before = client.get("/api/settings").json()
    on_disk = settings_file(server).read_bytes()
    r = client.patch("/api/settings", json=changes)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, list) and detail
    assert all(item["loc"][0] == "body" and item["msg"] and item["type"] for item in detail)
    assert SECRET not in r.text
    assert client.get("/api/settings").json() == before
    assert settings_file(server).read_bytes() == on_disk


def test_settings_survive_a_restart(server: ServerProcess) -> None:
    with server.client() as c:
        before = c.get("/api/settings").json()
    assert before["agent"]["llm"]["model"] == "openai/first" and before["git_user_name"] == "Ada"
    server.stop()
    server.start()
    with server.client() as c:
        assert c.get("/api/settings").json() == before
    assert stored(server)["agent"]["llm"]["api_key"] == SECRET


def test_a_null_clears_a_setting(client: httpx.Client, server: ServerProcess) -> None:
    answer = patch(client, {"git_user_name": None, "agent": {"llm": None, "tools": []}})
    assert has_defaults(answer), answer
    assert SECRET not in settings_file(server).read_text()


def test_unknown_tool_names_are_refused_in_settings(client: httpx.Client) -> None:
    before = client.get("/api/settings").json()
    r = client.patch(
        "/api/settings", json={"agent": {"tools": [{"name": "terminal"}, {"name": "teleporter"}]}}
    )
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "agent", "tools", 1, "name"]
    assert "terminal" in detail["msg"] and "teleporter" in detail["msg"]
    assert client.get("/api/settings").json() == before


def test_stored_secrets_show_names_only_and_null_removes_one(client: httpx.Client) -> None:
    r = client.patch(
        "/api/settings",
        json={"secrets": {"DEPLOY_TOKEN": "tok-123456", "OTHER_TOKEN": "tok-654321"}},
    )
    assert r.status_code == 200
    assert r.json()["secrets"] == {"DEPLOY_TOKEN": "**********", "OTHER_TOKEN": "**********"}
    assert "tok-123456" not in r.text
    r = client.patch("/api/settings", json={"secrets": {"DEPLOY_TOKEN": None}})
    assert r.status_code == 200
    assert r.json()["secrets"] == {"OTHER_TOKEN": "**********"}
    client.patch("/api/settings", json={"secrets": None})
    assert client.get("/api/settings").json()["secrets"] == {}


def test_mcp_env_and_header_values_are_masked_in_settings(client: httpx.Client) -> None:
    config = {
        "mcpServers": {
            "gh": {
                "url": "http://127.0.0.1:9/mcp",
                "headers": {"Authorization": "Bearer ghp_settings_secret"},
            },
            "local": {"command": "server", "env": {"PAT": "ghp_env_secret", "REF": "${PAT_NAME}"}},
        }
    }
    r = client.patch("/api/settings", json={"agent": {"mcp_config": config}})
    assert r.status_code == 200, r.text
    for answer in (r, client.get("/api/settings")):
        assert "ghp_settings_secret" not in answer.text and "ghp_env_secret" not in answer.text
        servers = answer.json()["agent"]["mcp_config"]["mcpServers"]
        assert servers["local"]["env"] == {"PAT": "**********", "REF": "${PAT_NAME}"}
    client.patch("/api/settings", json={"agent": {"mcp_config": None}})


def test_a_condenser_of_another_form_replaces_the_stored_one(
    client: httpx.Client, llm: ScriptedLLM
) -> None:
    """The fields of two condenser forms never merge: our own form patched over a stored
    NoOpCondenser is checked as our own form (a bad max_events is a 422, not ignored)."""
    r = client.patch("/api/settings", json={"agent": {"condenser": {"kind": "NoOpCondenser"}}})
    assert r.status_code == 200, r.text
    r = client.patch("/api/settings", json={"agent": {"condenser": {"max_events": [1]}}})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][:3] == ["body", "agent", "condenser"]
    r = client.patch("/api/settings", json={"agent": {"condenser": {"max_events": 50}}})
    assert r.status_code == 200, r.text
    assert r.json()["agent"]["condenser"]["max_events"] == 50
    assert "kind" not in r.json()["agent"]["condenser"]


def test_acp_agents_are_saved_by_name_and_conversations_refer_to_them(
    client: httpx.Client, server: ServerProcess, tmp_path: Path
) -> None:
    """A saved ACP agent: its literal env values masked in the settings (sending the mask back
    keeps them), started by a conversation that names it, its env reaching the agent and
    masked in the events; a name not saved is a 422 that creates nothing."""
    from tests.agent_server.agent.test_acp import AGENT

    value = f"acp-literal-{uuid.uuid4().hex[:8]}"
    shown = patch(
        client,
        {
            "acp_agents": {
                "scripted": {
                    "acp_command": AGENT,
                    "acp_env": {"ACP_TEST_SECRET": value, "REF": "${SOME_NAME}"},
                }
            }
        },
    )
    assert value not in json.dumps(shown)
    assert shown["acp_agents"]["scripted"]["acp_env"] == {
        "ACP_TEST_SECRET": MASK,
        "REF": "${SOME_NAME}",
    }
    shown = patch(
        client,
        {
            "acp_agents": {
                "scripted": {
                    "acp_args": [],
                    "acp_env": {"ACP_TEST_SECRET": MASK},
                    "acp_prompt_timeout": 600,
                }
            }
        },
    )
    assert stored(server)["acp_agents"]["scripted"]["acp_env"]["ACP_TEST_SECRET"] == value

    count = len(client.get("/api/conversations/search").json()["items"])
    ws = {"working_dir": str(tmp_path / "ws")}
    for agent, loc in (
        ({"kind": "ACPAgent", "acp_server": "nobody"}, "acp_server"),
        ({"kind": "ACPAgent"}, "acp_command"),
    ):
        r = client.post("/api/conversations", json={"agent": agent, "workspace": ws})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "agent", loc]
    r = client.patch("/api/settings", json={"acp_agents": {"bad": {"acp_command": []}}})
    assert r.status_code == 422 and "bad" not in client.get("/api/settings").json()["acp_agents"]
    # Merged with the request's own env, over the bound a request has: 422, no value shown.
    patch(
        client,
        {
            "acp_agents": {
                "big": {
                    "acp_command": AGENT,
                    "acp_env": {f"E{i}": f"{value}-{i}" for i in range(100)},
                }
            }
        },
    )
    r = client.post(
        "/api/conversations",
        json={
            "agent": {"kind": "ACPAgent", "acp_server": "big", "acp_env": {"MORE": "x"}},
            "workspace": ws,
        },
    )
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "agent", "acp_env"]
    assert value not in r.text
    patch(client, {"acp_agents": {"big": None}})
    assert len(client.get("/api/conversations/search").json()["items"]) == count

    r = client.post(
        "/api/conversations",
        json={
            "agent": {"kind": "ACPAgent", "acp_server": "scripted"},
            "workspace": ws,
            "initial_message": {
                "content": [{"type": "text", "text": "env ACP_TEST_SECRET"}],
                "run": True,
            },
        },
    )
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    agent = r.json()["agent"]
    assert (agent["acp_command"], agent["acp_server"], agent["acp_prompt_timeout"]) == (
        AGENT,
        "scripted",
        600,
    )
    assert agent["acp_env"]["ACP_TEST_SECRET"] == MASK
    calls = wait_for(
        lambda: [
            e
            for e in client.get(
                f"/api/conversations/{cid}/events/search", params={"kind__eq": "ACPToolCallEvent"}
            ).json()["items"]
            if e["status"] == "completed"
        ],
        timeout=60,
        what="the agent's env call",
    )
    assert calls[0]["raw_output"] == {"stdout": "<secret-hidden>"}  # it had the value
    assert value not in client.get(f"/api/conversations/{cid}/events/search").text
    assert "scripted" not in patch(client, {"acp_agents": {"scripted": None}})["acp_agents"]
