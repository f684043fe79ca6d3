"""Hooks (SPEC 6.2 HookExecutionEvent): real shell commands around tool calls and moments.

Each hook here is a plain `sh` command run in the test's workspace; what it read on stdin it
writes to a file there, so the tests check what an operator's script would see. The last
test restarts this module's server, so it stays last.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import create
from tests.support.api import events, send, status, wait_status
from tests.support.llm import Reply, ScriptedLLM, call, text
from tests.support.server import ServerProcess
from tests.support.wait import wait_for

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

HOOK_TYPES = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "SessionStart", "SessionEnd", "Stop")
#: Every field SPEC 6.2 gives a HookExecutionEvent, and the common ones of 6.1.
FIELDS = {
    "id",
    "timestamp",
    "source",
    "parent_id",
    "kind",
    "hook_event_type",
    "hook_command",
    "tool_name",
    "success",
    "blocked",
    "exit_code",
    "stdout",
    "stderr",
    "reason",
    "additional_context",
    "error",
    "action_id",
    "message_id",
    "hook_input",
}
#: Hooks here read their stdin first: one that exits before the server has written it can
#: crash the server's side (see test_a_hook_that_ignores_its_input_is_run_like_any_other).
READ = "cat > /dev/null; "
#: Two ways to deny: exit 2 with the reason on stderr, or exit 0 with a JSON decision.
DENIALS = {
    "exit 2": READ + 'echo "{reason}" >&2; exit 2',
    "json deny": READ + 'echo \'{{"decision": "deny", "reason": "{reason}"}}\'',
}


def deny(how: str, reason: str) -> str:
    return DENIALS[how].format(reason=reason)


def hooks(
    event_type: str, *commands: str, matcher: str = "*", timeout: float = 10
) -> dict[str, Any]:
    """A hook_config with one matcher group of `commands` for `event_type`."""
    return {
        event_type: [
            {
                "matcher": matcher,
                "hooks": [{"type": "command", "command": c, "timeout": timeout} for c in commands],
            }
        ]
    }


def hook_events(
    client: httpx.Client, cid: str, event_type: str | None = None
) -> list[dict[str, Any]]:
    found = events(client, cid, "HookExecutionEvent")
    return [e for e in found if event_type is None or e["hook_event_type"] == event_type]


def position(all_events: list[dict[str, Any]], event: dict[str, Any]) -> int:
    return [e["id"] for e in all_events].index(event["id"])


def write(path: Path, content: str = "x") -> Reply:
    return call(
        "file_editor", command="create", path=str(path), file_text=content, security_risk="LOW"
    )


def user_texts(request: dict[str, Any]) -> str:
    """Everything the model was shown as the user's, in one string."""
    out = []
    for m in request["messages"]:
        if m["role"] == "user":
            content = m["content"]
            if isinstance(content, str):
                content = [{"text": content}]
            out.extend(block.get("text", "") for block in content)
    return "\n".join(out)


# -- configuration ---------------------------------------------------------------------------


def test_get_hooks_returns_the_config(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    config = {
        "pre_tool_use": [{"matcher": "file_.*", "hooks": [{"command": "true", "timeout": 5}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "exit 0"}]}],
    }
    conv = create(client, llm, key, tmp_path, hook_config=config)
    r = client.get(f"/api/conversations/{conv['id']}/hooks")
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["PreToolUse"] == [
        {"matcher": "file_.*", "hooks": [{"type": "command", "command": "true", "timeout": 5}]}
    ]
    assert got["Stop"][0]["hooks"][0]["command"] == "exit 0"
    assert got["Stop"][0]["matcher"] == "*"
    assert all(
        got[t] == [] for t in ("PostToolUse", "UserPromptSubmit", "SessionStart", "SessionEnd")
    )
    assert conv["hook_config"] == got

    bare = create(client, llm, key, tmp_path)
    empty = client.get(f"/api/conversations/{bare['id']}/hooks").json()
    assert empty == {t: [] for t in HOOK_TYPES}
    missing = "/api/conversations/00000000-0000-4000-8000-000000000000/hooks"
    assert client.get(missing).status_code == 404


@pytest.mark.parametrize(
    ("config", "loc", "type_"),
    [
        (
            {"PreToolUse": [{"matcher": "file_(", "hooks": [{"command": "true"}]}]},
            ["PreToolUse", 0, "matcher"],
            "value_error",
        ),
        (
            {"PreToolUse": [{"hooks": [{"type": "prompt", "command": "true"}]}]},
            ["PreToolUse", 0, "hooks", 0, "type"],
            "literal_error",
        ),
        (
            {"Stop": [{"hooks": [{"command": "true", "timeout": 0}]}]},
            ["Stop", 0, "hooks", 0, "timeout"],
            "greater_than",
        ),
        (
            {"Stop": [{"hooks": [{"command": ""}]}]},
            ["Stop", 0, "hooks", 0, "command"],
            "string_too_short",
        ),
    ],
)
def test_an_invalid_hook_config_is_422(
    client: httpx.Client,
    llm: ScriptedLLM,
    key: str,
    tmp_path: Path,
    config: dict[str, Any],
    loc: list[Any],
    type_: str,
) -> None:
    r = client.post(
        "/api/conversations",
        json={
            "agent": {"llm": {"model": "openai/x", "base_url": llm.base_url(key), "api_key": "k"}},
            "workspace": {"working_dir": str(tmp_path)},
            "hook_config": config,
        },
    )
    assert r.status_code == 422, r.text
    assert [(e["loc"], e["type"]) for e in r.json()["detail"]] == [
        (["body", "hook_config", *loc], type_)
    ]


# -- PreToolUse ------------------------------------------------------------------------------


def test_pre_tool_use_allows_and_sees_the_call(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    target = tmp_path / "app.py"
    allow = (
        """echo '{"decision": "allow", "reason": "looks fine", """
        """"additionalContext": "checked"}'"""
    )
    config = hooks("PreToolUse", "cat > pre.json", READ + allow, matcher="file_editor")
    llm.script(
        key,
        call("think", thought="first"),
        write(target, "print(1)\n"),
        call("finish", message="done"),
    )
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        tools=["file_editor"],
        message="go",
        run=True,
        hook_config=config,
    )["id"]
    assert wait_status(client, cid) == "finished"
    assert target.read_text() == "print(1)\n"

    # Only the call the matcher names ran the hooks (not think, not finish).
    first, second = hook_events(client, cid)
    action = next(a for a in events(client, cid, "ActionEvent") if a["tool_name"] == "file_editor")
    assert set(first) == FIELDS
    assert first["source"] == "hook"
    assert first["hook_event_type"] == "PreToolUse" and first["hook_command"] == "cat > pre.json"
    assert first["tool_name"] == "file_editor"
    assert first["success"] is True and first["blocked"] is False and first["exit_code"] == 0
    assert first["stdout"] == "" and first["stderr"] == ""
    assert first["reason"] is None and first["additional_context"] is None
    assert first["error"] is None and first["message_id"] is None
    assert first["action_id"] == action["id"]
    stdin = json.loads((tmp_path / "pre.json").read_text())
    assert first["hook_input"] == stdin
    assert stdin["conversation_id"] == cid
    assert stdin["event_type"] == stdin["hook_event_name"] == "PreToolUse"
    assert stdin["tool_name"] == "file_editor"
    assert stdin["tool_input"] == {
        "command": "create",
        "path": str(target),
        "file_text": "print(1)\n",
        "security_risk": "LOW",
    }

    assert second["success"] is True and second["blocked"] is False
    assert second["reason"] == "looks fine" and second["additional_context"] == "checked"
    assert json.loads(second["stdout"])["decision"] == "allow"

    everything = events(client, cid)
    observation = next(
        o for o in events(client, cid, "ObservationEvent") if o["tool_name"] == "file_editor"
    )
    assert (
        position(everything, action)
        < position(everything, first)
        < position(everything, second)
        < position(everything, observation)
    )


@pytest.mark.parametrize("how", DENIALS)
def test_pre_tool_use_denial_skips_the_action(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, how: str
) -> None:
    target = tmp_path / "app.py"
    config = {
        **hooks(
            "PreToolUse",
            deny(how, "no writes in this repo"),
            READ + "touch second-ran",
            matcher="file_.*",
        ),
        **hooks("PostToolUse", READ + "touch post-ran"),
    }
    llm.script(key, write(target), call("finish", message="gave up"))
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        tools=["file_editor"],
        message="go",
        run=True,
        hook_config=config,
    )["id"]
    assert wait_status(client, cid) == "finished"
    assert not target.exists()
    # A block stops the later hooks of the moment, and the tool's PostToolUse never comes.
    assert not (tmp_path / "second-ran").exists()
    [pre] = hook_events(client, cid, "PreToolUse")
    assert pre["blocked"] is True
    assert pre["reason"] == "no writes in this repo"
    assert pre["exit_code"] == (2 if how == "exit 2" else 0)
    if how == "exit 2":
        assert pre["stderr"].strip() == "no writes in this repo"
    [action] = [a for a in events(client, cid, "ActionEvent") if a["tool_name"] == "file_editor"]
    assert pre["action_id"] == action["id"]
    [rejection] = events(client, cid, "UserRejectObservation")
    assert rejection["rejection_source"] == "hook"
    assert rejection["rejection_reason"] == "no writes in this repo"
    assert rejection["action_id"] == action["id"]
    assert [o["tool_name"] for o in events(client, cid, "ObservationEvent")] == ["finish"]
    assert [h["tool_name"] for h in hook_events(client, cid, "PostToolUse")] == ["finish"]
    # The model was told why, as the result of its call, and carried on.
    second = llm.requests_for(key)[1]["messages"]
    assert second[-1]["role"] == "tool" and "no writes in this repo" in second[-1]["content"]


# -- failures: reported, never blocking ------------------------------------------------------


CRASH = "cat > /dev/null; echo boom >&2; touch crashed; exit 1"
SLOW = "echo $$ > slow.pid; exec sleep 30"


@pytest.mark.parametrize("event_type", HOOK_TYPES)
def test_crashes_and_timeouts_are_reported_and_do_not_block(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, event_type: str
) -> None:
    target = tmp_path / "app.py"
    matcher = "file_editor" if event_type in ("PreToolUse", "PostToolUse") else "*"
    config = hooks(event_type, CRASH, SLOW, matcher=matcher, timeout=0.5)
    llm.script(key, write(target), call("finish", message="done"))
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        tools=["file_editor"],
        message="write app.py",
        run=True,
        hook_config=config,
    )["id"]
    assert wait_status(client, cid) == "finished"
    assert target.exists()  # the tool hooks did not stop the action
    assert len(llm.requests_for(key)) == 2  # a failed Stop hook did not send the agent back
    assert "write app.py" in user_texts(llm.requests_for(key)[0])  # nor hid the message

    if event_type == "SessionEnd":
        started = time.monotonic()
        assert client.delete(f"/api/conversations/{cid}").status_code == 200
        assert time.monotonic() - started < 10
        assert client.get(f"/api/conversations/{cid}").status_code == 404
        assert (tmp_path / "crashed").exists()
    else:
        crashed, slow = hook_events(client, cid, event_type)
        assert crashed["success"] is False and crashed["blocked"] is False
        assert crashed["exit_code"] == 1 and crashed["stderr"] == "boom\n"
        assert crashed["error"] and "1" in crashed["error"]
        assert slow["success"] is False and slow["blocked"] is False
        assert "timed out" in slow["error"]
    # The timed-out hook's process is gone, not left running.
    pid = int((tmp_path / "slow.pid").read_text())
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=5, what=f"hook process {pid} gone")


def test_an_interrupt_stops_a_running_hook(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    target = tmp_path / "app.py"
    llm.script(key, write(target), call("finish", message="done"))
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        tools=["file_editor"],
        message="go",
        run=True,
        hook_config=hooks("PreToolUse", READ + SLOW, matcher="file_editor", timeout=60),
    )["id"]
    pid_file = tmp_path / "slow.pid"
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), what="the hook started")
    pid = int(pid_file.read_text())
    started = time.monotonic()
    assert client.post(f"/api/conversations/{cid}/interrupt").status_code == 200
    assert status(client, cid) == "paused"
    assert time.monotonic() - started < 5
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=5, what=f"hook process {pid} gone")
    assert not target.exists()
    # The call got a result (the history stays valid), and `run` goes on from there.
    [error] = events(client, cid, "AgentErrorEvent")
    assert error["tool_name"] == "file_editor"
    client.post(f"/api/conversations/{cid}/run")
    assert wait_status(client, cid) == "finished"


def test_hook_output_is_bounded(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    noisy = (
        READ + "head -c 200000 /dev/zero | tr '\\0' a; head -c 200000 /dev/zero | tr '\\0' b >&2"
    )
    conv = create(
        client,
        llm,
        key,
        tmp_path,
        message="hello",
        run=False,
        hook_config=hooks("UserPromptSubmit", noisy),
    )
    [hook] = hook_events(client, conv["id"])
    assert hook["success"] is True
    for stream, letter in (("stdout", "a"), ("stderr", "b")):
        assert 1000 < len(hook[stream]) < 20_000
        assert hook[stream].startswith(letter * 1000)
        assert "cut" in hook[stream]


def test_a_hook_that_ignores_its_input_is_run_like_any_other(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    # The window is short: twenty such hooks a message, a few messages.
    conv = create(
        client, llm, key, tmp_path, hook_config=hooks("UserPromptSubmit", *["exit 0"] * 20)
    )
    for i in range(5):
        r = client.post(
            f"/api/conversations/{conv['id']}/events",
            json={"content": [{"type": "text", "text": f"message {i}"}]},
        )
        assert r.status_code == 200, f"message {i}: {r.status_code} {r.text}"
        assert len(hook_events(client, conv["id"])) == 20 * (i + 1)


# -- PostToolUse -----------------------------------------------------------------------------


def test_post_tool_use_context_reaches_the_model(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    target = tmp_path / "app.py"
    command = """cat > post.json; echo '{"additionalContext": "lint: 0 warnings"}'"""
    llm.script(key, write(target, "x = 1\n"), text("done"))
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        tools=["file_editor"],
        message="go",
        run=True,
        hook_config=hooks("PostToolUse", command, matcher="file_editor"),
    )["id"]
    assert wait_status(client, cid) == "finished"
    [observation] = events(client, cid, "ObservationEvent")
    assert [c["text"] for c in observation["extended_content"]] == ["lint: 0 warnings"]
    [hook] = hook_events(client, cid, "PostToolUse")
    assert hook["additional_context"] == "lint: 0 warnings"
    assert hook["action_id"] == observation["action_id"] and hook["tool_name"] == "file_editor"
    stdin = json.loads((tmp_path / "post.json").read_text())
    assert stdin["event_type"] == "PostToolUse" and stdin["tool_name"] == "file_editor"
    assert stdin["tool_input"]["path"] == str(target)
    assert str(target) in stdin["tool_response"]
    # The model read the context with the tool's result.
    tool_message = llm.requests_for(key)[1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert tool_message["content"].endswith("lint: 0 warnings")


@pytest.mark.parametrize("how", DENIALS)
def test_post_tool_use_denial_is_told_to_the_model(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, how: str
) -> None:
    target = tmp_path / "app.py"
    llm.script(key, write(target), text("I will fix the style"))
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        tools=["file_editor"],
        message="go",
        run=True,
        hook_config=hooks("PostToolUse", deny(how, "style check failed"), matcher="file_editor"),
    )["id"]
    assert wait_status(client, cid) == "finished"
    assert target.exists()  # it ran before the hook could say anything
    [hook] = hook_events(client, cid, "PostToolUse")
    assert hook["blocked"] is True and hook["reason"] == "style check failed"
    [observation] = events(client, cid, "ObservationEvent")
    assert any("style check failed" in c["text"] for c in observation["extended_content"])
    assert "style check failed" in llm.requests_for(key)[1]["messages"][-1]["content"]


# -- UserPromptSubmit ------------------------------------------------------------------------


def test_user_prompt_submit_sees_the_message_and_adds_context(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    command = (
        """cat > prompt.json; pwd > where.txt; """
        """echo '{"additionalContext": "The user is on the night shift."}'"""
    )
    llm.script(key, text("noted"))
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        message="fix the login bug",
        run=True,
        hook_config=hooks("UserPromptSubmit", command),
    )["id"]
    assert wait_status(client, cid) == "finished"
    [message] = events(client, cid, "MessageEvent", source__eq="user")
    [hook] = hook_events(client, cid)
    assert hook["message_id"] == message["id"]
    assert hook["tool_name"] is None and hook["action_id"] is None
    assert hook["additional_context"] == "The user is on the night shift."
    stdin = json.loads((tmp_path / "prompt.json").read_text())
    assert stdin == hook["hook_input"]
    assert stdin["conversation_id"] == cid and stdin["event_type"] == "UserPromptSubmit"
    assert stdin["message"] == "fix the login bug"
    assert (tmp_path / "where.txt").read_text().strip() == str(tmp_path)  # run in the workspace
    shown = user_texts(llm.requests_for(key)[0])
    assert "fix the login bug" in shown and "The user is on the night shift." in shown


@pytest.mark.parametrize("how", DENIALS)
def test_user_prompt_submit_denial_keeps_the_message_from_the_model(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, how: str
) -> None:
    command = f"if grep -q forbidden; then {deny(how, 'no forbidden words')}; fi"
    conv = create(
        client,
        llm,
        key,
        tmp_path,
        message="do the forbidden thing",
        run=True,
        hook_config=hooks("UserPromptSubmit", command),
    )
    cid = conv["id"]
    time.sleep(0.3)
    # The run did not start: the model was never asked.
    assert status(client, cid) == "idle"
    assert llm.requests_for(key) == []
    [message] = events(client, cid, "MessageEvent", source__eq="user")
    [hook] = hook_events(client, cid)
    assert hook["blocked"] is True and hook["reason"] == "no forbidden words"
    assert hook["message_id"] == message["id"]

    llm.script(key, text("done"))
    send(client, cid, "do the allowed thing")
    assert wait_status(client, cid) == "finished"
    shown = user_texts(llm.requests_for(key)[0])
    assert "do the allowed thing" in shown and "forbidden" not in shown


def test_a_blocked_message_never_reaches_a_running_agent(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    command = "if grep -q forbidden; then sleep 1.5; echo 'no forbidden words' >&2; exit 2; fi"
    llm.script(
        key,
        Reply(tool_calls=[("think", {"thought": "working"})], delay=0.5),
        call("finish", message="done"),
    )
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        message="work on it",
        run=True,
        hook_config=hooks("UserPromptSubmit", command),
    )["id"]
    wait_for(lambda: llm.requests_for(key), what="the first LLM request")
    send(client, cid, "and now the forbidden thing")  # returns once the hook has blocked it
    assert wait_status(client, cid) == "finished"
    assert [h["blocked"] for h in hook_events(client, cid)] == [False, True]
    for request in llm.requests_for(key):
        assert "forbidden" not in user_texts(request)


# -- SessionStart and SessionEnd -------------------------------------------------------------


def test_session_start_runs_once_before_the_first_step(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, write(tmp_path / "a.txt"), text("first"), text("second"))
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        tools=["file_editor"],
        message="go",
        run=True,
        hook_config=hooks("SessionStart", "cat > start.json"),
    )["id"]
    assert wait_status(client, cid) == "finished"
    send(client, cid, "again")
    assert wait_status(client, cid, "finished") == "finished"
    assert len(llm.requests_for(key)) == 3

    [hook] = hook_events(client, cid)  # once per session, not once per run
    everything = events(client, cid)
    first_action = events(client, cid, "ActionEvent")[0]
    first_reply = next(
        e for e in everything if e["kind"] == "ConversationStateUpdateEvent" and e["key"] == "stats"
    )
    assert position(everything, hook) < position(everything, first_reply)
    assert position(everything, hook) < position(everything, first_action)
    assert hook["tool_name"] is None and hook["action_id"] is None and hook["message_id"] is None
    stdin = json.loads((tmp_path / "start.json").read_text())
    assert stdin["conversation_id"] == cid and stdin["event_type"] == "SessionStart"


def test_session_start_context_reaches_the_model(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    command = READ + """echo '{"additionalContext": "Branch main is frozen."}'"""
    llm.script(key, text("ok"))
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        message="go",
        run=True,
        hook_config=hooks("SessionStart", command),
    )["id"]
    assert wait_status(client, cid) == "finished"
    assert hook_events(client, cid)[0]["additional_context"] == "Branch main is frozen."
    assert "Branch main is frozen." in json.dumps(llm.requests_for(key)[0]["messages"])


def test_session_end_runs_when_the_conversation_is_deleted(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, text("hi"))
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        message="go",
        run=True,
        hook_config=hooks("SessionEnd", "cat > end.json"),
    )["id"]
    assert wait_status(client, cid) == "finished"
    assert not (tmp_path / "end.json").exists()
    assert client.delete(f"/api/conversations/{cid}").status_code == 200
    stdin = json.loads((tmp_path / "end.json").read_text())
    assert stdin["conversation_id"] == cid and stdin["event_type"] == "SessionEnd"


@pytest.mark.parametrize("how", DENIALS)
@pytest.mark.parametrize("event_type", ["SessionStart", "SessionEnd"])
def test_session_hook_denials_are_recorded_and_change_nothing(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, how: str, event_type: str
) -> None:
    command = f"touch {event_type}-ran; {deny(how, 'not now')}"  # deny() reads stdin
    llm.script(key, text("hi"))
    cid = create(
        client, llm, key, tmp_path, message="go", run=True, hook_config=hooks(event_type, command)
    )["id"]
    assert wait_status(client, cid) == "finished"
    assert len(llm.requests_for(key)) == 1
    if event_type == "SessionStart":
        [hook] = hook_events(client, cid)
        assert hook["blocked"] is True and hook["reason"] == "not now"
    assert client.delete(f"/api/conversations/{cid}").status_code == 200
    assert client.get(f"/api/conversations/{cid}").status_code == 404
    assert (tmp_path / f"{event_type}-ran").exists()


# -- Stop ------------------------------------------------------------------------------------


def test_stop_hook_allows_the_end(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, call("finish", message="done"))
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        message="go",
        run=True,
        hook_config=hooks("Stop", "cat > stop.json"),
    )["id"]
    assert wait_status(client, cid) == "finished"
    [hook] = hook_events(client, cid)
    assert hook["hook_event_type"] == "Stop" and hook["blocked"] is False
    assert json.loads((tmp_path / "stop.json").read_text())["event_type"] == "Stop"
    assert not events(client, cid, "MessageEvent", source__eq="hook")


@pytest.mark.parametrize("how", DENIALS)
def test_stop_denial_sends_the_agent_back_with_the_reason(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, how: str
) -> None:
    once = (
        READ
        + "if [ -e stopped-once ]; then exit 0; fi; touch stopped-once; "
        + deny(how, "run the tests first")
    )
    llm.script(key, call("finish", message="done"), call("finish", message="tests pass, done"))
    cid = create(
        client, llm, key, tmp_path, message="go", run=True, hook_config=hooks("Stop", once)
    )["id"]
    assert wait_status(client, cid) == "finished"
    assert [h["blocked"] for h in hook_events(client, cid)] == [True, False]
    [feedback] = events(client, cid, "MessageEvent", source__eq="hook")
    assert "run the tests first" in feedback["llm_message"]["content"][0]["text"]
    requests = llm.requests_for(key)
    assert len(requests) == 2
    last = requests[1]["messages"][-1]
    assert last["role"] == "user" and "run the tests first" in json.dumps(last["content"])


def test_stop_denials_are_bounded(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, *[call("finish", message=f"done {i}") for i in range(8)])
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        message="go",
        run=True,
        hook_config=hooks("Stop", deny("exit 2", "never good enough")),
    )["id"]
    assert wait_status(client, cid) == "finished"
    stops = hook_events(client, cid, "Stop")
    assert len(stops) == 4 and all(h["blocked"] for h in stops)
    assert len(events(client, cid, "MessageEvent", source__eq="hook")) == 3
    assert len(llm.requests_for(key)) == 4


# Last: it restarts this module's server.
def test_session_end_runs_when_the_server_stops(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, server: ServerProcess
) -> None:
    llm.script(key, text("hi"))
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        message="go",
        run=True,
        hook_config=hooks("SessionEnd", "cat > end.json"),
    )["id"]
    assert wait_status(client, cid) == "finished"
    idle = create(
        client, llm, key, tmp_path / "idle", hook_config=hooks("SessionEnd", "cat > end.json")
    )["id"]
    server.stop()
    try:
        stdin = json.loads((tmp_path / "end.json").read_text())
        assert stdin["conversation_id"] == cid and stdin["event_type"] == "SessionEnd"
        # A conversation whose session never started has no end to report.
        assert not (tmp_path / "idle" / "end.json").exists()
    finally:
        server.start()
    [hook] = hook_events(client, cid, "SessionEnd")
    assert hook["success"] is True
    assert status(client, idle) == "idle"
