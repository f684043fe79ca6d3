"""Secrets and plugins of a start request (SPEC 2.5, 5 rule 4): a conversation's own secret wins
over the stored one of the same name, both reach the terminal, and they fill `${NAME}` in a
plugin's (MCP server's) configuration before it starts."""

from __future__ import annotations

import json

import pytest

from core.masking import MASK
from tests.control_plane.support import ControlPlane, configure_llm, start
from tests.support.llm import ScriptedLLM, call
from tests.support.mcp_servers import env_server_config
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e


def test_conversation_secrets_win_and_fill_plugins(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    client = control_plane.client(control_plane.new_user("alice"))
    configure_llm(
        client,
        llm.base_url(key),
        tools=["terminal"],
        secrets={"TOKEN": "stored-token-value", "SHARED": "stored-shared-value"},
    )
    check = (
        'test "$SHARED" = conv-shared-value && test "$TOKEN" = stored-token-value '
        "&& echo ok > verdict.txt"
    )
    llm.script(
        key,
        call("local_env", var="API_TOKEN"),
        call("terminal", command=check),
        call("finish", message="done"),
    )
    task = start(
        client,
        "go",
        secrets={"SHARED": "conv-shared-value"},
        plugins=[{"name": "local", **env_server_config(API_TOKEN="${SHARED}")}],
    )
    assert task["status"] == "READY", task
    cid = task["app_conversation_id"]
    wait_for(
        lambda: (
            client.get("/api/v1/app-conversations", params={"ids": cid}).json()[0][
                "execution_status"
            ]
            == "finished"
        ),
        60,
        what="the run",
    )
    r = client.get(f"/api/v1/app-conversations/{cid}/file", params={"path": "verdict.txt"})
    assert r.status_code == 200 and r.text == "ok\n"

    def observations() -> list[dict[str, object]]:
        items: list[dict[str, object]] = client.get(
            f"/api/v1/conversation/{cid}/events/search", params={"kind__eq": "ObservationEvent"}
        ).json()["items"]
        return items if len(items) >= 2 else []

    first = wait_for(observations, 30)[0]
    assert first["tool_name"] == "local_env"
    stored = json.dumps(first)
    # The MCP server saw the conversation's value: masked as a secret of this conversation.
    assert (
        MASK in stored and "stored-shared-value" not in stored and "conv-shared-value" not in stored
    )
