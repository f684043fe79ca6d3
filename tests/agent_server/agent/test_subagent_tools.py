"""task, delegate and workflow through the agent loop, in-process with a ScriptedModel.

A sub-agent is a child conversation: the script answers the parent and its children in the
order they ask (a child runs while its parent's call waits), so each test reads as the
conversation it scripts.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from agent_server.agent.model import Scripted, ScriptedModel
from tests.support.inprocess import app_client
from tests.support.scripted_client import (
    create,
    events,
    finish,
    observations,
    status,
    text_of,
    tool_call,
    wait_status,
)
from tests.support.wait import wait_for
from tools.base import ToolContext, ToolError
from tools.conversation import SubagentResult, SubagentTask
from tools.subagents.common import SubagentParams, agent_type, check_limits, child_tools


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def children_of(client: Any, cid: str) -> list[dict[str, Any]]:
    r = client.get("/api/conversations/search", params={"parent_conversation_id": cid})
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


def test_task_runs_a_child_conversation_and_returns_its_report(
    tmp_path: Path, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("the answer is 42\n")
    model = ScriptedModel(
        [
            tool_call(
                "task",
                prompt="Find the answer in notes.txt",
                subagent_type="code-explorer",
                description="find the answer",
            ),
            tool_call("read_file", file_path="notes.txt"),  # the child
            finish("The answer is 42 (notes.txt line 1)."),  # the child
            tool_call("task", prompt="x", subagent_type="wizard"),  # bad: unknown type
            tool_call("task", description="no prompt"),  # bad: prompt missing
            finish("done"),
        ]
    )
    with app_client(tmp_path, model) as client:
        parent = create(client, workspace, ["task", "read_file", "grep", "terminal"])
        assert wait_status(client, parent["id"]) == "finished"
        obs = observations(client, parent["id"])
        first = obs[0]
        assert first["observation"]["kind"] == "TaskObservation"
        assert first["observation"]["status"] == "completed"
        assert first["observation"]["subagent"] == "code-explorer"
        assert "The answer is 42" in text_of(first)
        child_id = first["observation"]["task_id"]

        # The child is an ordinary conversation, linked to its parent, seen by every route.
        child = client.get(f"/api/conversations/{child_id}").json()
        assert child["parent_conversation_id"] == parent["id"]
        assert child["execution_status"] == "finished"
        assert child["title"] == "find the answer"
        assert [c["id"] for c in children_of(client, parent["id"])] == [child_id]
        prompt = events(client, child_id, "SystemPromptEvent")[0]
        # code-explorer: the read-only tools among the parent's (no terminal, no task).
        assert sorted(t["title"] for t in prompt["tools"]) == [
            "finish",
            "grep",
            "read_file",
            "think",
        ]
        child_obs = observations(client, child_id)
        assert "the answer is 42" in text_of(child_obs[0])

        assert obs[1]["kind"] == "AgentErrorEvent" and "Unknown subagent_type" in text_of(obs[1])
        assert obs[2]["kind"] == "AgentErrorEvent" and "prompt" in text_of(obs[2])
        assert len(children_of(client, parent["id"])) == 1


def test_resume_continues_the_same_child(tmp_path: Path, workspace: Path) -> None:
    model = ScriptedModel(
        [
            tool_call("task", prompt="remember the word 'kiwi'"),
            finish("noted"),
        ]
    )
    with app_client(tmp_path, model) as client:
        parent = create(client, workspace, ["task"])
        wait_status(client, parent["id"])
        child_id = observations(client, parent["id"])[0]["observation"]["task_id"]
        model.script += [
            tool_call("task", prompt="which word?", resume=child_id),
            finish("kiwi"),
            tool_call("task", prompt="again", resume="not-a-child"),
            finish("done"),
        ]
        r = client.post(
            f"/api/conversations/{parent['id']}/events",
            json={"role": "user", "content": [{"type": "text", "text": "ask"}], "run": True},
        )
        assert r.status_code == 200
        wait_for(lambda: len(observations(client, parent["id"])) >= 4, what="resume")
        assert wait_status(client, parent["id"]) == "finished"
        obs = observations(client, parent["id"])
        # (the first run ended with a plain "done": obs[1] is the resumed task)
        assert obs[1]["observation"]["task_id"] == child_id and "kiwi" in text_of(obs[1])
        assert obs[2]["kind"] == "AgentErrorEvent" and "No sub-agent" in text_of(obs[2])
        # The child's own history holds both tasks; still one child.
        messages = [e for e in events(client, child_id, "MessageEvent") if e["source"] == "user"]
        assert len(messages) == 2
        assert len(children_of(client, parent["id"])) == 1


def test_depth_and_count_limits(tmp_path: Path, workspace: Path) -> None:
    model = ScriptedModel(
        [
            tool_call("task", prompt="level one"),
            tool_call("task", prompt="level two"),  # the child: at max_depth 2 it may
            tool_call("task", prompt="level three"),  # the grandchild has no task tool
            finish("grandchild done"),
            finish("child done"),
            tool_call("task", prompt="second child"),  # count: max_subagents 2 over the tree? no:
            finish("second done"),  # per conversation, so this one is fine
            tool_call("task", prompt="third child"),  # the third child of the top one: refused
            finish("top done"),
        ]
    )
    params = {"max_depth": 2, "max_subagents": 2, "max_iterations": 10}
    with app_client(tmp_path, model) as client:
        top = create(client, workspace, [{"name": "task", "params": params}])
        assert wait_status(client, top["id"]) == "finished"
        obs = observations(client, top["id"])
        child_id = obs[0]["observation"]["task_id"]
        grandchild = observations(client, child_id)[0]["observation"]["task_id"]
        g_prompt = events(client, grandchild, "SystemPromptEvent")[0]
        assert sorted(t["title"] for t in g_prompt["tools"]) == ["finish", "think"]
        g_obs = observations(client, grandchild)
        assert g_obs[0]["kind"] == "AgentErrorEvent" and "Unknown tool 'task'" in text_of(g_obs[0])
        assert obs[1]["observation"]["status"] == "completed"
        assert obs[2]["kind"] == "AgentErrorEvent"
        assert "may start 2 sub-agents and has started 2" in text_of(obs[2])
        assert len(children_of(client, top["id"])) == 2


def test_params_are_checked_at_creation(tmp_path: Path, workspace: Path) -> None:
    with app_client(tmp_path, ScriptedModel()) as client:
        for tool, params in (
            ("task", {"max_depth": 0}),
            ("delegate", {"max_subagents": 1000}),
            ("workflow", {"unknown": 1}),
        ):
            r = client.post(
                "/api/conversations",
                json={
                    "agent": {"llm": {"model": "m"}, "tools": [{"name": tool, "params": params}]},
                    "workspace": {"working_dir": str(workspace)},
                },
            )
            assert r.status_code == 422, r.text
            assert r.json()["detail"][0]["loc"][:4] == ["body", "agent", "tools", 0]
        r = client.post(
            "/api/conversations",
            json={
                "agent": {"llm": {"model": "m"}},
                "workspace": {"working_dir": str(workspace)},
                "parent_conversation_id": "00000000-0000-0000-0000-000000000001",
            },
        )
        assert r.status_code == 422 and "not found" in r.text


def test_interrupting_the_parent_stops_its_child(tmp_path: Path, workspace: Path) -> None:
    model = ScriptedModel(
        [
            tool_call("task", prompt="take your time"),
            Scripted(content="slow", delay=60),  # the child's model call hangs
        ]
    )
    with app_client(tmp_path, model) as client:
        parent = create(client, workspace, ["task"])
        child_id = wait_for(
            lambda: (
                (kids := children_of(client, parent["id"]))
                and kids[0]["execution_status"] == "running"
                and kids[0]["id"]
            ),
            what="the child to run",
        )
        wait_for(lambda: len(model.requests) >= 2, what="the child's model call")
        started = time.monotonic()
        assert client.post(f"/api/conversations/{parent['id']}/interrupt").status_code == 200
        assert status(client, parent["id"]) == "paused"
        assert wait_status(client, child_id, timeout=5) == "paused"
        assert time.monotonic() - started < 5
        kinds = [e["kind"] for e in events(client, child_id)]
        assert "InterruptEvent" in kinds
        errors = events(client, parent["id"], "AgentErrorEvent")
        assert errors and "Interrupted" in errors[-1]["error"]


def test_deleting_the_parent_stops_its_child(tmp_path: Path, workspace: Path) -> None:
    model = ScriptedModel(
        [
            tool_call("task", prompt="take your time"),
            Scripted(content="slow", delay=60),
        ]
    )
    with app_client(tmp_path, model) as client:
        parent = create(client, workspace, ["task"])
        child_id = wait_for(
            lambda: (kids := children_of(client, parent["id"])) and kids[0]["id"], what="the child"
        )
        wait_for(lambda: len(model.requests) >= 2, what="the child's model call")
        assert client.delete(f"/api/conversations/{parent['id']}").status_code == 200
        assert wait_status(client, child_id, timeout=5) == "paused"
        # The child stays (its own log), no longer running.
        assert client.get(f"/api/conversations/{child_id}").status_code == 200


@pytest.mark.e2e  # runs bash
def test_children_inherit_secrets_masked(tmp_path: Path, workspace: Path) -> None:
    secret = "sk-live-very-secret-value"
    model = ScriptedModel(
        [
            tool_call("task", prompt="print it", subagent_type="bash-runner"),
            tool_call("terminal", command="echo token=$API_TOKEN"),
            finish("printed"),
            finish("done"),
        ]
    )
    with app_client(tmp_path, model) as client:
        parent = create(client, workspace, ["task", "terminal"], secrets={"API_TOKEN": secret})
        assert wait_status(client, parent["id"]) == "finished"
        child_id = observations(client, parent["id"])[0]["observation"]["task_id"]
        child = client.get(f"/api/conversations/{child_id}").json()
        assert child["secret_names"] == ["API_TOKEN"]
        shown = json.dumps(events(client, child_id))
        assert "token=<secret-hidden>" in shown and secret not in shown
        assert secret not in json.dumps(model.requests)


def test_delegate_runs_named_subagents_in_parallel(tmp_path: Path, workspace: Path) -> None:
    model = ScriptedModel(
        [
            tool_call(
                "delegate",
                command="spawn",
                ids=["alpha", "beta"],
                agent_types=["", "code-explorer"],
            ),
            tool_call("delegate", command="delegate", tasks={"alpha": "say A", "beta": "say B"}),
            finish("report one"),
            finish("report two"),  # the two children, in either order
            tool_call("delegate", command="delegate", tasks={"gamma": "?"}),  # not spawned
            tool_call("delegate", command="spawn"),  # no ids
            finish("done"),
        ]
    )
    with app_client(tmp_path, model) as client:
        parent = create(client, workspace, ["delegate", "read_file"])
        assert wait_status(client, parent["id"]) == "finished"
        obs = observations(client, parent["id"])
        assert obs[0]["observation"] == {
            **obs[0]["observation"],
            "kind": "DelegateObservation",
            "command": "spawn",
        }
        assert "alpha (general-purpose), beta (code-explorer)" in text_of(obs[0])
        report = text_of(obs[1])
        assert "2 of 2 task(s) completed" in report
        assert "report one" in report and "report two" in report
        assert "## alpha (completed" in report and "## beta (completed" in report
        assert len(children_of(client, parent["id"])) == 2
        assert obs[2]["kind"] == "AgentErrorEvent" and "Not spawned: gamma" in text_of(obs[2])
        assert obs[3]["kind"] == "AgentErrorEvent" and "needs `ids`" in text_of(obs[3])


@pytest.mark.e2e  # runs bash
def test_workflow_reports_each_step(tmp_path: Path, workspace: Path) -> None:
    flows = workspace / ".agents" / "workflows"
    flows.mkdir(parents=True)
    (flows / "check.yaml").write_text(
        "description: count and explain\n"
        "steps:\n"
        "  - name: count\n"
        "    command: printf 'three files'\n"
        "  - name: explain\n"
        "    prompt: 'Explain: {{steps.count.output}}'\n"
        "  - name: broken\n"
        "    command: exit 3\n"
        "  - name: never\n"
        "    command: echo unreachable\n"
    )
    (flows / "bad.json").write_text('{"steps": [{"command": "a", "prompt": "b"}]}')
    model = ScriptedModel(
        [
            tool_call("workflow", name="check"),
            finish("explained"),  # the sub-agent of step 2
            tool_call("workflow", name="bad"),
            tool_call("workflow", name="missing"),
            tool_call("workflow", name="inline", script='{"steps": [{"command": "echo hi"}]}'),
            finish("done"),
        ]
    )
    with app_client(tmp_path, model) as client:
        parent = create(client, workspace, ["workflow"])
        assert wait_status(client, parent["id"]) == "finished"
        obs = observations(client, parent["id"])
        report = text_of(obs[0])
        assert obs[0]["observation"]["kind"] == "WorkflowObservation"
        assert obs[0]["observation"]["status"] == "error" and obs[0]["observation"]["is_error"]
        assert "1. count (command): ok, exit 0" in report and "three files" in report
        assert "2. explain (sub-agent): ok" in report and "explained" in report
        assert "3. broken (command): failed, exit 3" in report
        assert "4. never (command): skipped" in report
        child = children_of(client, parent["id"])[0]
        first = [e for e in events(client, child["id"], "MessageEvent") if e["source"] == "user"]
        assert "Explain: three files" in first[0]["llm_message"]["content"][0]["text"]
        assert obs[1]["kind"] == "AgentErrorEvent" and "exactly one of" in text_of(obs[1])
        assert obs[2]["kind"] == "AgentErrorEvent" and "No workflow named 'missing'" in text_of(
            obs[2]
        )
        assert obs[3]["observation"]["status"] == "completed" and "hi" in text_of(obs[3])


# -- units: the limits and the cancellation, without a server ----------------------------------


class FakeSubagents:
    def __init__(
        self, depth: int = 0, tools: list[str] | None = None, made: int = 0, delay: float = 0
    ) -> None:
        self._depth, self._tools, self._made, self.delay = depth, tools or [], made, delay
        self.started: list[SubagentTask] = []
        self.cancelled = 0

    def depth(self) -> int:
        return self._depth

    def tool_names(self) -> list[str]:
        return self._tools

    def spawned(self) -> int:
        return self._made

    async def run(self, task: SubagentTask) -> SubagentResult:
        self.started.append(task)
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return SubagentResult(f"child-{len(self.started)}", "finished", "ok")


def test_limits_refuse_past_depth_and_count() -> None:
    params = SubagentParams(max_depth=2, max_subagents=3)
    check_limits(FakeSubagents(depth=1, made=2), params, 1)
    with pytest.raises(ToolError, match="nest 2 deep"):
        check_limits(FakeSubagents(depth=2), params, 1)
    with pytest.raises(ToolError, match="may start 3"):
        check_limits(FakeSubagents(made=2), params, 2)
    tools = ["terminal", "task", "grep", "delegate"]
    _, general = agent_type("General Purpose")
    assert child_tools(FakeSubagents(depth=0, tools=tools), general, params) == tuple(tools)
    assert child_tools(FakeSubagents(depth=1, tools=tools), general, params) == ("terminal", "grep")
    _, runner = agent_type("bash_runner")
    with pytest.raises(ToolError, match="none of the tools"):
        child_tools(FakeSubagents(tools=["grep"]), runner, params)


async def test_cancelling_a_delegate_call_cancels_every_child(tmp_path: Path) -> None:
    from tools.subagents import DelegateTool

    fake = FakeSubagents(tools=["terminal"], delay=60)
    ctx = ToolContext("c", working_dir=tmp_path, state_dir=tmp_path / "state", subagents=fake)
    tool = DelegateTool(ctx, {})
    await tool.run(DelegateTool.parse({"command": "spawn", "ids": ["a", "b"]}))
    call = asyncio.create_task(
        tool.run(DelegateTool.parse({"command": "delegate", "tasks": {"a": "x", "b": "y"}}))
    )
    while len(fake.started) < 2:
        await asyncio.sleep(0.01)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert fake.cancelled == 2


async def test_without_the_seam_the_model_hears_why(tmp_path: Path) -> None:
    from tools.subagents import TaskTool

    tool = TaskTool(ToolContext("c", working_dir=tmp_path, state_dir=tmp_path), {})
    with pytest.raises(ToolError, match="not available"):
        await tool.run(TaskTool.parse({"prompt": "x"}))


# -- end to end: the real server, litellm and the scripted LLM server --------------------------


@pytest.mark.e2e  # a server process and the scripted LLM server
def test_task_round_trip_through_litellm(client: Any, llm: Any, key: str, workspace: Path) -> None:
    from tests.conftest import create as create_e2e
    from tests.support.api import events as events_e2e
    from tests.support.api import wait_status as wait_e2e
    from tests.support.llm import call

    # The child inherits its parent's LLM, so one script serves both, in call order.
    llm.script(
        key,
        call("task", prompt="say hello", description="greet"),
        call("finish", message="hello from the child"),
        call("finish", message="the child said hello"),
    )
    conv = create_e2e(client, llm, key, workspace, tools=["task"], message="go", run=True)
    assert wait_e2e(client, conv["id"]) == "finished"
    obs = events_e2e(client, conv["id"], "ObservationEvent")[0]
    assert obs["observation"]["kind"] == "TaskObservation"
    assert "hello from the child" in text_of(obs)
    child = client.get(f"/api/conversations/{obs['observation']['task_id']}").json()
    assert child["parent_conversation_id"] == conv["id"] and child["execution_status"] == "finished"
    assert child["agent"]["llm"]["api_key"] == "**********"


def test_the_servers_cap_holds_over_parallel_children(tmp_path: Path, workspace: Path) -> None:
    """Three children delegated at once on a server capped at two sub-agents (over all trees):
    two run, the third is refused in words, and no more than two exist."""
    model = ScriptedModel(
        [
            tool_call("delegate", command="spawn", ids=["a", "b", "c"]),
            tool_call(
                "delegate", command="delegate", tasks={"a": "say A", "b": "say B", "c": "say C"}
            ),
            finish("report one"),
            finish("report two"),  # the two children that run
            finish("done"),
        ]
    )
    with app_client(tmp_path, model, max_subagents=2) as client:
        parent = create(client, workspace, ["delegate"])
        assert wait_status(client, parent["id"]) == "finished"
        report = text_of(observations(client, parent["id"])[1])
        assert "2 of 3 task(s) completed" in report, report
        assert "runs its most sub-agents (2)" in report, report
        assert len(children_of(client, parent["id"])) == 2
