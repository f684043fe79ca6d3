"""agent.critic (SPEC 2.7 CriticResult on ActionEvent and MessageEvent) on a real server: a
command critic in the workspace, a model critic asked through litellm of the scripted LLM,
critics that fail, and configurations refused with 422.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import agent_spec
from tests.support.api import events, send, wait_status
from tests.support.llm import ScriptedLLM, call, text

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

CRITIC_KEY = "sk-critic-key-1234"


def start(
    client: httpx.Client,
    llm: ScriptedLLM,
    key: str,
    workspace: Path,
    critic: dict[str, Any] | None,
    *replies: Any,
) -> str:
    llm.script(key, *replies)
    agent = agent_spec(llm, key)
    if critic is not None:
        agent["critic"] = critic
    r = client.post(
        "/api/conversations", json={"agent": agent, "workspace": {"working_dir": str(workspace)}}
    )
    assert r.status_code == 201, r.text
    cid = str(r.json()["id"])
    send(client, cid, "write the report")
    return cid


def history_ids(client: httpx.Client, cid: str) -> list[str]:
    """The system prompt and the user's message: what the model saw before answering."""
    every = events(client, cid)
    return [
        e["id"]
        for e in every
        if e["kind"] == "SystemPromptEvent"
        or (e["kind"] == "MessageEvent" and e["source"] == "user")
    ]


def test_a_command_critic_scores_the_finish(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    critic = {
        "kind": "CommandCritic",
        "command": 'cat > judged.json; echo \'{"score": 0.875, "message": "report written"}\'',
    }
    cid = start(client, llm, key, tmp_path, critic, call("finish", message="report is ready"))
    assert wait_status(client, cid) == "finished"
    [finish] = events(client, cid, "ActionEvent")
    assert finish["critic_result"] == {
        "score": 0.875,
        "message": "report written",
        "metadata": {
            "event_ids": history_ids(client, cid),
            "critic": "CommandCritic",
            "llm_response_id": finish["llm_response_id"],
        },
    }
    judged = json.loads((tmp_path / "judged.json").read_text())
    assert judged["subject"]["arguments"] == {"message": "report is ready"}


def test_a_model_critic_scores_an_agent_message(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    critic_key = key + "-critic"
    llm.script(critic_key, text('{"score": 0.3, "message": "the report is missing a section"}'))
    critic = {
        "kind": "ModelCritic",
        "llm": {
            "model": "openai/critic-model",
            "base_url": llm.base_url(critic_key),
            "api_key": CRITIC_KEY,
            "num_retries": 0,
        },
    }
    cid = start(client, llm, key, tmp_path, critic, text("Here is the report."))
    assert wait_status(client, cid) == "finished"
    [reply] = [e for e in events(client, cid, "MessageEvent") if e["source"] == "agent"]
    result = reply["critic_result"]
    assert (result["score"], result["message"]) == (0.3, "the report is missing a section")
    assert result["metadata"]["event_ids"] == history_ids(client, cid)
    [asked] = llm.requests_for(critic_key)
    assert asked["model"] == "critic-model"
    assert asked["messages"][0]["content"].startswith("You are a critic")
    assert "Here is the report." in asked["messages"][1]["content"]
    assert "write the report" in asked["messages"][1]["content"]
    # The critic's key is kept for its calls and masked in what the server shows.
    shown = client.get(f"/api/conversations/{cid}").json()["agent"]["critic"]
    assert shown["llm"]["api_key"] == "**********"
    assert CRITIC_KEY not in json.dumps(events(client, cid))


def test_a_critic_failing_or_hanging_does_not_break_the_run(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    critic_key = key + "-critic"
    llm.script(critic_key, text("I would rather not say."))  # not a score
    model = {
        "kind": "ModelCritic",
        "llm": {
            "model": "openai/critic-model",
            "num_retries": 0,
            "base_url": llm.base_url(critic_key),
            "api_key": "k",
        },
    }
    hanging = {"kind": "CommandCritic", "command": "sleep 60", "timeout": 1}
    failing = {"kind": "CommandCritic", "command": "exit 7"}
    started = time.monotonic()
    cids = [
        start(client, llm, f"{key}-{i}", tmp_path, critic, call("finish", message="ok"))
        for i, critic in enumerate((model, hanging, failing))
    ]
    for cid in cids:
        assert wait_status(client, cid) == "finished"
        [finish] = events(client, cid, "ActionEvent")
        assert finish["critic_result"] is None
        assert len(events(client, cid, "ObservationEvent")) == 1
    assert time.monotonic() - started < 30


def changed_repository(workspace: Path) -> None:
    """A repository with one commit and a file changed since: a non-empty patch."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main"]
    (workspace / "report.md").write_text("draft\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "first"]):
        subprocess.run([*git, *args], cwd=workspace, check=True)
    (workspace / "report.md").write_text("final\n")


@pytest.mark.parametrize(
    ("kind", "changed", "reply", "score", "message"),
    [
        ("PassCritic", False, "finish", 1.0, "PassCritic always succeeds"),
        ("EmptyPatchCritic", False, "finish", 0.0, "Git patch is empty or missing"),
        ("EmptyPatchCritic", True, "message", 1.0, "Git patch is non-empty"),
        (
            "AgentFinishedCritic",
            True,
            "finish",
            1.0,
            "Agent completed with FinishAction and non-empty patch",
        ),
        (
            "AgentFinishedCritic",
            True,
            "message",
            0.0,
            "Agent did not finish properly. No FinishAction found",
        ),
        (
            "AgentFinishedCritic",
            False,
            "finish",
            0.0,
            "Agent did not produce a non-empty git patch. Empty git patch",
        ),
    ],
)
def test_the_sdks_local_critics_score_as_the_sdk_does(
    client: httpx.Client,
    llm: ScriptedLLM,
    key: str,
    tmp_path: Path,
    kind: str,
    changed: bool,
    reply: str,
    score: float,
    message: str,
) -> None:
    """Issue 30.6: the OpenHands SDK's critics that need no model were refused with 422. The
    SDK's dump (mode, iterative_refinement) is accepted; the patch is the workspace's."""
    if changed:
        changed_repository(tmp_path)
    critic = {"kind": kind, "mode": "finish_and_message", "iterative_refinement": None}
    answer = call("finish", message="done") if reply == "finish" else text("Here it is.")
    cid = start(client, llm, key, tmp_path, critic, answer)
    assert wait_status(client, cid) == "finished"
    judged = [e for e in events(client, cid) if e.get("critic_result") is not None]
    assert [e["kind"] for e in judged] == ["ActionEvent" if reply == "finish" else "MessageEvent"]
    result = judged[0]["critic_result"]
    assert (result["score"], result["message"]) == (score, message)
    assert result["metadata"]["critic"] == kind
    assert client.get(f"/api/conversations/{cid}").json()["agent"]["critic"] == {
        "kind": kind,
        "mode": "finish_and_message",
    }


@pytest.mark.parametrize(
    ("critic", "loc", "type_"),
    [
        ({"command": "true"}, ["critic"], "critic_kind"),
        ({"kind": "APIBasedCritic", "server_url": "https://x"}, ["critic"], "critic_kind"),
        ({"kind": "CommandCritic"}, ["critic", "CommandCritic", "command"], "missing"),
        (
            {"kind": "CommandCritic", "command": ""},
            ["critic", "CommandCritic", "command"],
            "string_too_short",
        ),
        (
            {"kind": "CommandCritic", "command": "true", "timeout": 0},
            ["critic", "CommandCritic", "timeout"],
            "greater_than",
        ),
        (
            {"kind": "CommandCritic", "command": "true", "mode": "sometimes"},
            ["critic", "CommandCritic", "mode"],
            "literal_error",
        ),
        ({"kind": "ModelCritic"}, ["critic", "ModelCritic", "llm"], "missing"),
        (
            {"kind": "ModelCritic", "llm": {"model": ""}},
            ["critic", "ModelCritic", "llm", "model"],
            "string_too_short",
        ),
        ("yes", ["critic"], "critic_kind"),
    ],
)
def test_a_bad_critic_is_422(
    client: httpx.Client,
    llm: ScriptedLLM,
    key: str,
    tmp_path: Path,
    critic: Any,
    loc: list[Any],
    type_: str,
) -> None:
    agent = {**agent_spec(llm, key), "critic": critic}
    r = client.post(
        "/api/conversations", json={"agent": agent, "workspace": {"working_dir": str(tmp_path)}}
    )
    assert r.status_code == 422, r.text
    [problem] = r.json()["detail"]
    assert problem["loc"][:2] == ["body", "agent"]
    assert problem["loc"][2:] == loc
    assert problem["type"] == type_
    if type_ == "critic_kind":
        assert problem["msg"] == (
            "kind must be one of ModelCritic, CommandCritic, PassCritic, "
            "EmptyPatchCritic, AgentFinishedCritic"
        )


def test_no_critic_is_the_default(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    cid = start(client, llm, key, tmp_path, None, text("done"))
    assert wait_status(client, cid) == "finished"
    assert client.get(f"/api/conversations/{cid}").json()["agent"]["critic"] is None
    [reply] = [e for e in events(client, cid, "MessageEvent") if e["source"] == "agent"]
    assert reply["critic_result"] is None
