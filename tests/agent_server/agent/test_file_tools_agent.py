"""The workspace file tools through the agent loop: the real server, litellm and the scripted
LLM. Each tool is called as a model calls it; the ObservationEvent holds what the model reads,
and a bad call gives an error the model reads, and the run goes on."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import agent_spec, create
from tests.support.api import events, wait_status
from tests.support.llm import Reply, ScriptedLLM, call

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

NEW_TOOLS = [
    "apply_patch",
    "glob",
    "grep",
    "list_directory",
    "read_file",
    "write_file",
    "edit",
    "planning_file_editor",
]


def run(
    client: httpx.Client,
    llm: ScriptedLLM,
    key: str,
    workspace: Path,
    tools: list[str],
    *replies: Reply,
    **extra: Any,
) -> tuple[str, list[dict[str, Any]]]:
    """Run a conversation through the scripted replies (then finish); its observations."""
    llm.script(key, *replies, call("finish", message="done"))
    conv = create(client, llm, key, workspace, tools=tools, message="go", run=True, **extra)
    assert wait_status(client, conv["id"]) == "finished"
    return conv["id"], events(client, conv["id"], "ObservationEvent")


def text_of(observation_event: dict[str, Any]) -> str:
    return "".join(c["text"] for c in observation_event["observation"]["content"])


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / f"ws-{uuid.uuid4().hex[:6]}"
    path.mkdir()
    return path


def test_apply_patch_through_the_loop(
    client: httpx.Client, llm: ScriptedLLM, key: str, workspace: Path
) -> None:
    (workspace / "app.py").write_text("def main():\n    return 1\n")
    good = (
        "*** Begin Patch\n*** Update File: app.py\n@@ def main():\n-    return 1\n"
        "+    return 2\n*** Add File: notes.txt\n+hello\n*** End Patch\n"
    )
    bad = (
        "*** Begin Patch\n*** Add File: more.txt\n+x\n*** Update File: app.py\n@@\n"
        "-    return 99\n+    return 3\n*** End Patch\n"
    )
    _, obs = run(
        client,
        llm,
        key,
        workspace,
        ["apply_patch"],
        call("apply_patch", patch=good),
        call("apply_patch", patch=bad),
        call("apply_patch", patch="not a patch"),
    )
    first, second, third = obs[:3]
    assert first["tool_name"] == "apply_patch"
    assert first["observation"]["kind"] == "ApplyPatchObservation"
    assert "M app.py" in text_of(first) and "A notes.txt" in text_of(first)
    assert first["observation"]["commit"]["changes"]["notes.txt"]["type"] == "add"
    assert (workspace / "app.py").read_text() == "def main():\n    return 2\n"
    assert second["observation"]["is_error"] and "app.py: hunk 1" in text_of(second)
    assert not (workspace / "more.txt").exists()
    assert third["observation"]["is_error"] and "*** Begin Patch" in text_of(third)


def test_glob_and_grep_through_the_loop(
    client: httpx.Client, llm: ScriptedLLM, key: str, workspace: Path
) -> None:
    (workspace / "src").mkdir()
    (workspace / "src/a.py").write_text("def find_me():\n    pass\n")
    (workspace / "b.txt").write_text("nothing\n")
    cid, obs = run(
        client,
        llm,
        key,
        workspace,
        ["glob", "grep"],
        call("glob", pattern="**/*.py"),
        call("grep", pattern="find_me"),
        call("grep", pattern="(unclosed"),
        call("grep", pattern="x", path="/etc"),
        call("glob"),
    )
    assert obs[0]["observation"]["files"] == [str(workspace / "src/a.py")]
    assert obs[1]["observation"]["matches"] == [str(workspace / "src/a.py")]
    assert "1: def find_me():" in text_of(obs[1])
    assert obs[2]["observation"]["is_error"] and "could not search" in text_of(obs[2])
    assert obs[3]["observation"]["is_error"] and "outside the workspace" in text_of(obs[3])
    # A call missing its pattern never reaches the tool: the model hears what was missing.
    errors = events(client, cid, "AgentErrorEvent")
    assert len(errors) == 1 and "pattern" in errors[0]["error"]


def test_gemini_file_tools_through_the_loop(
    client: httpx.Client, llm: ScriptedLLM, key: str, workspace: Path, tmp_path: Path
) -> None:
    tools = ["list_directory", "read_file", "write_file", "edit"]
    _, obs = run(
        client,
        llm,
        key,
        workspace,
        tools,
        call("write_file", file_path="pkg/mod.py", content="x = 1\ny = 2\n"),
        call("edit", file_path="pkg/mod.py", old_string="y = 2", new_string="y = 3"),
        call("read_file", file_path="pkg/mod.py"),
        call("list_directory", dir_path="pkg"),
        call("read_file", file_path=str(tmp_path)),
        call("edit", file_path="pkg/mod.py", old_string="nope", new_string="x"),
        call("write_file", file_path="../escape.txt", content="x"),
    )
    kinds = [o["observation"]["kind"] for o in obs[:7]]
    assert kinds == [
        "WriteFileObservation",
        "EditObservation",
        "ReadFileObservation",
        "ListDirectoryObservation",
        "ReadFileObservation",
        "EditObservation",
        "WriteFileObservation",
    ]
    assert obs[0]["observation"]["is_new_file"]
    assert obs[1]["observation"]["replacements_made"] == 1
    assert obs[2]["observation"]["file_content"] == "x = 1\ny = 3\n"
    assert "     2\ty = 3" in text_of(obs[2])
    assert [e["name"] for e in obs[3]["observation"]["entries"]] == ["mod.py"]
    assert all(o["observation"]["is_error"] for o in obs[4:7])
    assert "outside the workspace" in text_of(obs[4]) and "not found" in text_of(obs[5])
    assert not (workspace.parent / "escape.txt").exists()


def test_planning_file_editor_through_the_loop(
    client: httpx.Client, llm: ScriptedLLM, key: str, workspace: Path
) -> None:
    (workspace / "app.py").write_text("print('hi')\n")
    plan = workspace / "docs" / "PLAN.md"
    llm.script(
        key,
        call("planning_file_editor", command="view", path=str(workspace / "app.py")),
        call("planning_file_editor", command="create", path=str(plan), file_text="# Plan\n"),
        call(
            "planning_file_editor",
            command="str_replace",
            path=str(workspace / "app.py"),
            old_str="hi",
            new_str="bye",
        ),
        call("finish", message="planned"),
    )
    spec = agent_spec(llm, key)
    spec["tools"] = [{"name": "planning_file_editor", "params": {"plan_path": "docs/PLAN.md"}}]
    r = client.post(
        "/api/conversations",
        json={
            "agent": spec,
            "workspace": {"working_dir": str(workspace)},
            "initial_message": {"content": [{"type": "text", "text": "plan"}], "run": True},
        },
    )
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    assert wait_status(client, cid) == "finished"
    obs = events(client, cid, "ObservationEvent")
    assert "print('hi')" in text_of(obs[0])
    assert plan.read_text() == "# Plan\n"
    assert obs[2]["observation"]["is_error"] and "only change the plan file" in text_of(obs[2])
    assert (workspace / "app.py").read_text() == "print('hi')\n"


def test_planning_params_are_checked_at_creation(
    client: httpx.Client, llm: ScriptedLLM, key: str, workspace: Path
) -> None:
    spec = agent_spec(llm, key)
    spec["tools"] = [{"name": "planning_file_editor", "params": {"plan_path": "../PLAN.md"}}]
    r = client.post(
        "/api/conversations", json={"agent": spec, "workspace": {"working_dir": str(workspace)}}
    )
    assert r.status_code == 422, r.text
    assert "plan_path" in r.text


def test_secrets_in_file_contents_are_masked(
    client: httpx.Client, llm: ScriptedLLM, key: str, workspace: Path
) -> None:
    secret = f"sk-live-{uuid.uuid4().hex}"
    (workspace / "config.txt").write_text(f"TOKEN={secret}\n")
    _, obs = run(
        client,
        llm,
        key,
        workspace,
        ["read_file", "grep"],
        call("read_file", file_path="config.txt"),
        call("grep", pattern="TOKEN"),
        secrets={"TOKEN": secret},
    )
    assert "TOKEN=" in text_of(obs[0]) and "config.txt" in text_of(obs[1])
    for o in obs[:2]:
        assert secret not in str(o)
    assert secret not in str(llm.requests_for(key)[-1])


def test_the_prompt_lists_exactly_the_tools_given(
    client: httpx.Client, llm: ScriptedLLM, key: str, workspace: Path
) -> None:
    cid, _ = run(client, llm, key, workspace, NEW_TOOLS)
    prompt = events(client, cid, "SystemPromptEvent")[0]
    assert sorted(t["title"] for t in prompt["tools"]) == sorted([*NEW_TOOLS, "finish", "think"])
    usable = client.get("/server_info").json()["usable_tools"]
    assert set(NEW_TOOLS) <= set(usable)
