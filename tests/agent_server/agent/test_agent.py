"""The agent loop end to end: the real server, litellm, and the scripted LLM."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import create
from tests.support.api import events, send, status, tool_names, wait_status
from tests.support.llm import Reply, ScriptedLLM, call, calls, error, text
from tests.support.wait import wait_for

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e


def test_runs_to_finish_with_real_tool_effects(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    target = tmp_path / "app.py"
    llm.script(
        key,
        call(
            "task_tracker",
            command="plan",
            task_list=[{"title": "write app.py", "status": "in_progress"}],
        ),
        call("file_editor", command="create", path=str(target), file_text="print('hi')\n"),
        call("file_editor", command="str_replace", path=str(target), old_str="hi", new_str="hello"),
        call("finish", message="app.py prints hello"),
    )
    conv = create(
        client,
        llm,
        key,
        tmp_path,
        tools=["file_editor", "task_tracker"],
        message="write app.py",
        run=True,
    )
    assert wait_status(client, conv["id"]) == "finished"
    assert target.read_text() == "print('hello')\n"

    kinds = [e["kind"] for e in events(client, conv["id"])]
    assert kinds[:3] == ["SystemPromptEvent", "MessageEvent", "ConversationStateUpdateEvent"]
    observations = events(client, conv["id"], "ObservationEvent")
    assert [o["tool_name"] for o in observations] == [
        "task_tracker",
        "file_editor",
        "file_editor",
        "finish",
    ]
    assert "write app.py" in observations[0]["observation"]["content"][0]["text"]
    actions = events(client, conv["id"], "ActionEvent")
    assert all(o["action_id"] == a["id"] for o, a in zip(observations, actions))
    statuses = [
        e["value"]
        for e in events(client, conv["id"], "ConversationStateUpdateEvent")
        if e["key"] == "execution_status"
    ]
    assert statuses == ["running", "finished"]

    # The model saw each result after its call, and its own earlier calls.
    last = llm.requests_for(key)[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user"] + ["assistant", "tool"] * 3
    assert last[-1]["tool_call_id"] == last[-2]["tool_calls"][0]["id"]

    info = client.get(f"/api/conversations/{conv['id']}").json()
    usage = info["metrics"]["accumulated_token_usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] == 40


def test_tools_offered_follow_the_agent_spec(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, call("finish", message="ok"), call("finish", message="ok"))
    with_tools = create(client, llm, key, tmp_path, tools=["file_editor"], message="go", run=True)
    wait_status(client, with_tools["id"])
    bare = create(client, llm, key, tmp_path, message="go", run=True)
    wait_status(client, bare["id"])

    first, second = llm.requests_for(key)
    assert sorted(tool_names(first)) == ["file_editor", "finish", "think"]
    assert sorted(tool_names(second)) == ["finish", "think"]
    prompt = events(client, bare["id"], "SystemPromptEvent")[0]
    assert sorted(t["title"] for t in prompt["tools"]) == ["finish", "think"]


def test_parallel_calls_share_a_response_and_run_in_order(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(
        key,
        calls(("think", {"thought": "one"}), ("think", {"thought": "two"}), text="thinking twice"),
        call("finish", message="done"),
    )
    conv = create(client, llm, key, tmp_path, message="go", run=True)
    assert wait_status(client, conv["id"]) == "finished"
    actions = events(client, conv["id"], "ActionEvent")[:2]
    assert actions[0]["llm_response_id"] == actions[1]["llm_response_id"]
    assert actions[0]["thought"][0]["text"] == "thinking twice" and actions[1]["thought"] == []
    assert [a["action"]["thought"] for a in actions] == ["one", "two"]
    second = llm.requests_for(key)[1]["messages"]
    assert len(second[2]["tool_calls"]) == 2
    assert [m["tool_call_id"] for m in second[3:5]] == [c["id"] for c in second[2]["tool_calls"]]


def test_calls_after_finish_are_not_run(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    target = tmp_path / "late.txt"
    llm.script(
        key,
        calls(
            ("finish", {"message": "done"}),
            ("file_editor", {"command": "create", "path": str(target), "file_text": "x"}),
        ),
    )
    conv = create(client, llm, key, tmp_path, tools=["file_editor"], message="go", run=True)
    assert wait_status(client, conv["id"]) == "finished"
    assert not target.exists()
    errors = events(client, conv["id"], "AgentErrorEvent")
    assert [e["tool_name"] for e in errors] == ["file_editor"]


def test_bad_arguments_are_reported_and_the_model_recovers(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(
        key,
        call("file_editor", command="create"),  # no path
        call("file_editor", _args="{not json"),
        call("no_such_tool", x=1),
        call("file_editor", command="create", path=str(tmp_path / "ok.txt"), file_text="ok"),
        call("finish", message="done"),
    )
    conv = create(client, llm, key, tmp_path, tools=["file_editor"], message="go", run=True)
    assert wait_status(client, conv["id"]) == "finished"
    errors = [e["error"] for e in events(client, conv["id"], "AgentErrorEvent")]
    assert "path" in errors[0] and "Field required" in errors[0]
    assert "Invalid JSON" in errors[1]
    assert "Unknown tool 'no_such_tool'" in errors[2] and "file_editor" in errors[2]
    assert (tmp_path / "ok.txt").read_text() == "ok"
    # The model was told each time, as the result of its call.
    fourth = llm.requests_for(key)[3]["messages"]
    assert fourth[-1]["role"] == "tool" and "Unknown tool" in fourth[-1]["content"]
    invalid = events(client, conv["id"], "ActionEvent")[0]
    assert invalid["action"] is None


def test_rate_limit_is_retried_after_retry_after(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, error(429, "slow down", retry_after=0.3), call("finish", message="done"))
    conv = create(client, llm, key, tmp_path, message="go", run=True)
    assert wait_status(client, conv["id"]) == "finished"
    assert len(llm.requests_for(key)) == 2


def test_authentication_error_is_not_retried(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, error(401, "bad key"))
    conv = create(client, llm, key, tmp_path, message="go", run=True)
    assert wait_status(client, conv["id"]) == "error"
    assert len(llm.requests_for(key)) == 1
    failure = events(client, conv["id"], "ConversationErrorEvent")[-1]
    assert failure["code"] == "AuthenticationError"
    assert "sk-test-key" not in json.dumps(events(client, conv["id"]))


def test_server_errors_are_retried_then_reported(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, error(500), error(500), error(500))
    conv = create(client, llm, key, tmp_path, message="go", run=True)
    assert wait_status(client, conv["id"]) == "error"
    assert len(llm.requests_for(key)) == 3  # the first try and num_retries=2
    assert events(client, conv["id"], "ConversationErrorEvent")[-1]["code"] == "InternalServerError"


def test_interrupt_cancels_a_slow_reply_and_run_resumes(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, Reply(text="never seen", delay=30), call("finish", message="done"))
    conv = create(client, llm, key, tmp_path, message="go", run=True)
    wait_for(lambda: llm.requests_for(key), what="the LLM request")
    started = time.monotonic()
    assert client.post(f"/api/conversations/{conv['id']}/interrupt").status_code == 200
    assert status(client, conv["id"]) == "paused"
    assert time.monotonic() - started < 10
    assert events(client, conv["id"], "InterruptEvent")
    assert not events(client, conv["id"], "MessageEvent", source__eq="agent")

    client.post(f"/api/conversations/{conv['id']}/run")
    assert wait_status(client, conv["id"], "finished") == "finished"


def test_pause_takes_effect_between_steps(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(
        key,
        Reply(tool_calls=[("think", {"thought": "a"})], delay=1.0),
        call("finish", message="done"),
    )
    conv = create(client, llm, key, tmp_path, message="go", run=True)
    wait_for(lambda: llm.requests_for(key), what="the LLM request")
    client.post(f"/api/conversations/{conv['id']}/pause")
    assert wait_status(client, conv["id"]) == "paused"
    # The step in flight completed: its action ran and has its observation.
    assert len(events(client, conv["id"], "ObservationEvent")) == 1
    assert len(llm.requests_for(key)) == 1
    client.post(f"/api/conversations/{conv['id']}/run")
    assert wait_status(client, conv["id"], "finished") == "finished"


def test_a_run_asked_before_a_pause_takes_effect_withdraws_it(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    """Pause then run, both during one step (a control plane thawing a sandbox it froze while
    its run wound down): the run goes on to its end."""
    llm.script(
        key,
        Reply(tool_calls=[("think", {"thought": "a"})], delay=1.0),
        call("finish", message="done"),
    )
    conv = create(client, llm, key, tmp_path, message="go", run=True)
    wait_for(lambda: llm.requests_for(key), what="the LLM request")
    client.post(f"/api/conversations/{conv['id']}/pause")
    assert client.post(f"/api/conversations/{conv['id']}/run").status_code == 200
    assert wait_status(client, conv["id"]) == "finished"
    assert len(llm.requests_for(key)) == 2


def test_max_iterations_ends_with_an_error(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, *[call("think", thought=f"step {i}") for i in range(5)])
    conv = create(client, llm, key, tmp_path, message="go", run=True, max_iterations=3)
    assert wait_status(client, conv["id"]) == "error"
    assert (
        events(client, conv["id"], "ConversationErrorEvent")[-1]["code"] == "MaxIterationsReached"
    )
    assert len(llm.requests_for(key)) == 3


def test_a_repeating_agent_is_stuck(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, *[call("think", thought="same") for _ in range(6)])
    conv = create(client, llm, key, tmp_path, message="go", run=True)
    assert wait_status(client, conv["id"]) == "stuck"
    assert len(llm.requests_for(key)) == 4


def test_alternating_agent_is_stuck(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, *[call("think", thought="ab"[i % 2]) for i in range(8)])
    conv = create(client, llm, key, tmp_path, message="go", run=True)
    assert wait_status(client, conv["id"]) == "stuck"
    assert len(llm.requests_for(key)) == 6


def test_a_plain_reply_finishes_and_a_new_message_continues(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, text("Which file?"), call("finish", message="done"))
    conv = create(client, llm, key, tmp_path, message="fix it", run=True)
    assert wait_status(client, conv["id"]) == "finished"
    reply = events(client, conv["id"], "MessageEvent", source__eq="agent")[0]
    assert reply["llm_message"]["content"][0]["text"] == "Which file?"
    send(client, conv["id"], "app.py")
    assert wait_status(client, conv["id"], "finished") == "finished"
    roles = [m["role"] for m in llm.requests_for(key)[1]["messages"]]
    assert roles == ["system", "user", "assistant", "user"]


def test_streaming_stores_the_same_events_and_no_deltas(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(
        key,
        call("think", "let me think about this", thought="streamed"),
        text("all done, streamed in pieces"),
    )
    conv = create(client, llm, key, tmp_path, message="go", run=True, llm_extra={"stream": True})
    assert wait_status(client, conv["id"]) == "finished"
    action = events(client, conv["id"], "ActionEvent")[0]
    assert action["action"]["thought"] == "streamed"
    assert action["thought"][0]["text"] == "let me think about this"
    reply = events(client, conv["id"], "MessageEvent", source__eq="agent")[0]
    assert reply["llm_message"]["content"][0]["text"] == "all done, streamed in pieces"
    assert not events(client, conv["id"], "StreamingDeltaEvent")
    assert all(r["stream"] for r in llm.requests_for(key))


def test_anthropic_thinking_blocks_are_kept_and_sent_back(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(
        key,
        Reply(
            text="checking",
            thinking=[("I should think first", "sig-123")],
            tool_calls=[("think", {"thought": "x"})],
        ),
        Reply(text="done"),
    )
    body = {
        "agent": {
            "llm": {
                "model": "anthropic/claude-sonnet-4-5",
                "api_key": "sk-ant-test",
                "base_url": llm.anthropic_base_url(key),
                "reasoning_effort": "low",
            }
        },
        "workspace": {"working_dir": str(tmp_path)},
        "initial_message": {"content": [{"text": "go"}], "run": True},
    }
    conv = client.post("/api/conversations", json=body).json()
    assert wait_status(client, conv["id"]) == "finished"
    action = events(client, conv["id"], "ActionEvent")[0]
    assert action["thinking_blocks"] == [
        {"type": "thinking", "thinking": "I should think first", "signature": "sig-123"}
    ]
    replayed = llm.requests_for(key)[1]["messages"]
    assistant = next(m for m in replayed if m["role"] == "assistant")
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": "I should think first",
        "signature": "sig-123",
    }
    assert usage_of(client, conv["id"])["prompt_tokens"] == 200


def usage_of(client: httpx.Client, cid: str) -> dict[str, int]:
    return client.get(f"/api/conversations/{cid}").json()["metrics"]["accumulated_token_usage"]


def test_cost_comes_from_the_bundled_price_map(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(
        key,
        text("hi", usage={"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}),
    )
    body = {
        "agent": {
            "llm": {"model": "openai/gpt-4o", "api_key": "sk-test", "base_url": llm.base_url(key)}
        },
        "workspace": {"working_dir": str(tmp_path)},
        "initial_message": {"content": [{"text": "go"}], "run": True},
    }
    conv = client.post("/api/conversations", json=body).json()
    assert wait_status(client, conv["id"]) == "finished"
    metrics = client.get(f"/api/conversations/{conv['id']}").json()["metrics"]
    assert metrics["accumulated_cost"] > 0
    assert metrics["accumulated_token_usage"]["prompt_tokens"] == 1000


def test_twenty_conversations_run_at_once(
    client: httpx.Client, llm: ScriptedLLM, tmp_path: Path
) -> None:
    ids = []
    for i in range(20):
        key = f"many-{i}-{time.time_ns()}"
        llm.script(
            key,
            *[call("think", thought=f"{i}-{n}") for n in range(3)],
            call("finish", message=f"done {i}"),
        )
        ids.append(create(client, llm, key, tmp_path, message="go", run=True)["id"])
    for cid in ids:
        assert wait_status(client, cid) == "finished"
        assert len(events(client, cid, "ObservationEvent")) == 4


def test_terminal_effects_persist_across_calls(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(
        key,
        call("terminal", command="mkdir sub && cd sub && export GREETING=hello"),
        call("terminal", command="echo $GREETING > out.txt && pwd"),
        call("finish", message="done"),
    )
    conv = create(client, llm, key, tmp_path, tools=["terminal"], message="go", run=True)
    assert wait_status(client, conv["id"]) == "finished"
    assert (tmp_path / "sub" / "out.txt").read_text() == "hello\n"
    second = events(client, conv["id"], "ObservationEvent")[1]["observation"]
    assert second["exit_code"] == 0
    assert str(tmp_path / "sub") in second["content"][0]["text"]


def test_interrupt_during_a_tool_leaves_a_valid_history(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    llm.script(
        key,
        call("terminal", command=f"touch {started} && sleep 100"),
        call("finish", message="done"),
    )
    conv = create(client, llm, key, tmp_path, tools=["terminal"], message="go", run=True)
    # The tool itself says when it is running (no guess at how long that takes).
    wait_for(started.exists, what="the terminal command to start")
    assert client.post(f"/api/conversations/{conv['id']}/interrupt").status_code == 200
    assert status(client, conv["id"]) == "paused"
    [error] = events(client, conv["id"], "AgentErrorEvent")
    assert (error["tool_name"], error["error"]) == (
        "terminal",
        "Interrupted before this call finished.",
    )
    client.post(f"/api/conversations/{conv['id']}/run")
    assert wait_status(client, conv["id"], "finished") == "finished"
    # The model saw a result for its cut call before being asked again.
    second = llm.requests_for(key)[1]["messages"]
    assert second[-1]["role"] == "tool" and "Interrupted" in second[-1]["content"]


def test_restart_in_the_middle_of_a_run(llm: ScriptedLLM, key: str, tmp_path: Path) -> None:
    from tests.support.server import ServerProcess

    proc = ServerProcess(tmp_path / "state").start()
    try:
        llm.script(key, call("terminal", command="sleep 100"), call("finish", message="done"))
        with proc.client() as c:
            conv = create(c, llm, key, tmp_path / "ws", tools=["terminal"], message="go", run=True)
            wait_for(lambda: events(c, conv["id"], "ActionEvent"), what="the terminal call")
        proc.kill()
        proc.start()
        with proc.client() as c:
            assert status(c, conv["id"]) == "error"
            assert events(c, conv["id"], "ConversationErrorEvent")[-1]["code"] == "RunInterrupted"
            c.post(f"/api/conversations/{conv['id']}/run")
            assert wait_status(c, conv["id"], "finished") == "finished"
            errors = events(c, conv["id"], "AgentErrorEvent")
            assert [e["tool_name"] for e in errors] == ["terminal"]
            messages = llm.requests_for(key)[-1]["messages"]
            assert messages[-1]["role"] == "tool"
    finally:
        proc.stop()


def test_a_run_killed_midway_keeps_what_it_counted(
    llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    """The server killed during a run, after a response was counted (its `stats` update in
    the log): after the restart the conversation's totals still count it, and the run
    continued adds to them. The record is saved at status moves only, and the restart read
    the totals of the run's start: the response's tokens were gone."""
    from tests.support.server import ServerProcess

    first = {"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290}
    llm.script(
        key,
        Reply(tool_calls=[("terminal", {"command": "sleep 100"})], usage=first),
        call("finish", message="done"),
    )
    proc = ServerProcess(tmp_path / "state").start()
    try:
        with proc.client() as c:
            conv = create(c, llm, key, tmp_path / "ws", tools=["terminal"], message="go", run=True)
            wait_for(
                lambda: [
                    e
                    for e in events(c, conv["id"], "ConversationStateUpdateEvent")
                    if e["key"] == "stats"
                ],
                what="the first response counted",
            )
        proc.kill()
        proc.start()

        def totals(c: httpx.Client) -> dict[str, Any]:
            info = c.get(f"/api/conversations/{conv['id']}").json()
            found: dict[str, Any] = next(iter(info["stats"]["usage_to_metrics"].values()))
            return found

        with proc.client() as c:
            assert status(c, conv["id"]) == "error"
            after = totals(c)
            assert after["response_count"] == 1
            assert after["accumulated_token_usage"]["prompt_tokens"] == 1234
            c.post(f"/api/conversations/{conv['id']}/run")
            assert wait_status(c, conv["id"], "finished") == "finished"
            done = totals(c)
            assert done["response_count"] == 2
            assert done["accumulated_token_usage"]["prompt_tokens"] > 1234
    finally:
        proc.stop()


def test_a_model_server_that_writes_headers_and_body_apart_costs_no_ack_delay(
    client: httpx.Client, tmp_path: Path
) -> None:
    """Against a server that sends its headers, then its body, with Nagle on (http.server),
    each reply used to wait ~40 ms for the client's delayed ACK before its body came."""
    raw = ScriptedLLM().start_raw()
    try:
        steps = 12
        raw.script("k", *[call("think", thought=f"step {i}") for i in range(steps)], text("done"))
        conv = create(client, raw, "k", tmp_path, message="think", run=True)
        wait_status(client, conv["id"], "finished", timeout=60)
        stamps = [
            datetime.fromisoformat(e["timestamp"]).timestamp()
            for e in events(client, conv["id"], "ActionEvent")
        ]
        delays = sorted((a - r) * 1000 for a, r in zip(stamps, raw.answered["k"]))
        assert len(delays) == steps
        # The stall was 40 ms and more at every step; a loaded machine slows some steps
        # for its own reasons, but not all: the fastest quarter shows whether it is gone.
        assert delays[steps // 4] < 25, delays
    finally:
        raw.stop()


def fresh_python(script: str) -> subprocess.CompletedProcess[str]:
    """`script` run by a new interpreter at the repository's root (its imports its own)."""
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[3],
    )


def test_a_call_with_tools_loads_neither_litellm_s_mcp_gateway_nor_a_tokenizer(
    llm: ScriptedLLM, key: str
) -> None:
    """Each was tens of MB a conversation never used (the server went from ~190 to ~250 MB
    on its first step)."""
    llm.script(key, call("think", thought="x"))
    script = f"""
import asyncio, sys
from agent_server.agent import llm
from agent_server.agent.spec import LLMConfig
config = LLMConfig(model="openai/test-model", base_url={llm.base_url(key)!r}, api_key="sk",
                   num_retries=0)
think = {{"name": "think", "parameters": {{"type": "object"}}}}
tools = [{{"type": "function", "function": think}}]
done = asyncio.run(llm.complete(config, [{{"role": "user", "content": "x"}}], tools))
assert done.tool_calls[0].name == "think", done
gateway = [m for m in sys.modules if m.startswith("mcp.server")
           or m == "litellm.responses.mcp.litellm_proxy_mcp_handler"]
encoding = sys.modules["litellm.main"]._encoding_cache
print(gateway, type(encoding).__name__, getattr(encoding, "_encoding", "loaded"))
"""
    out = fresh_python(script)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["[]", "_LazyEncoding", "None"], out.stdout


def test_a_streamed_call_to_a_server_that_reports_usage_loads_no_tokenizer(
    llm: ScriptedLLM, key: str
) -> None:
    """litellm priced a streamed call's stream the moment it began (an empty completion,
    counted with the model's tokenizer): tiktoken's cl100k, ~40 MB more in every server whose
    conversations stream. A server that reports no usage still has its tokens counted."""
    llm.script(
        key,
        call("think", "thinking aloud", thought="x"),
        Reply(text="a server that counts nothing", report_usage=False),
    )
    script = f"""
import asyncio, gc
from agent_server.agent import llm
from agent_server.agent.spec import LLMConfig
config = LLMConfig(model="openai/gpt-4o", base_url={llm.base_url(key)!r}, api_key="sk",
                   num_retries=0, stream=True)
think = {{"name": "think", "parameters": {{"type": "object"}}}}
tools = [{{"type": "function", "function": think}}]
deltas = []
def call():
    on_delta = lambda text, reasoning: deltas.append(text)
    return asyncio.run(llm.complete(config, [{{"role": "user", "content": "x"}}], tools, on_delta))
def tokenizers():
    import tiktoken.registry
    from litellm.litellm_core_utils.tokenizer import OpenAIEncoding
    kinds = (tiktoken.Encoding, OpenAIEncoding)
    objects = sum(isinstance(o, kinds) for o in gc.get_objects())
    return sorted(tiktoken.registry.ENCODINGS) + [objects]
done = call()
assert done.tool_calls[0].name == "think" and deltas and done.usage.prompt_tokens, done
print(tokenizers(), done.cost > 0)
counted = call()
print(counted.usage.completion_tokens > 0)
"""
    out = fresh_python(script)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["[0]", "True", "True"], out.stdout


def test_the_import_loads_what_the_first_call_would(llm: ScriptedLLM, key: str) -> None:
    """A server loads litellm in the background: its first call must find all it needs there
    (FIRST_CALL), not import more of it while the conversation waits."""
    llm.script(key, call("think", thought="x"))
    script = f"""
import asyncio, sys
from agent_server.agent import litellm_setup, llm
from agent_server.agent.spec import LLMConfig
litellm_setup.load_now()
before = set(sys.modules)
config = LLMConfig(model="openai/test-model", base_url={llm.base_url(key)!r}, api_key="sk",
                   num_retries=0)
think = {{"name": "think", "parameters": {{"type": "object"}}}}
tools = [{{"type": "function", "function": think}}]
asyncio.run(llm.complete(config, [{{"role": "user", "content": "x"}}], tools))
print(sorted(m for m in set(sys.modules) - before if m.startswith(("litellm", "anyio"))))
"""
    out = fresh_python(script)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["[]"], out.stdout
