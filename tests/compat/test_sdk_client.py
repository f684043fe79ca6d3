"""The OpenHands SDK client (openhands-sdk 1.58.0), unchanged, against this server (issue 12).

Each test scripts the LLM, runs one client script under the SDK venv and checks every step it
took, every websocket frame and every stored event (validated with the SDK's own models), and
that each blocking call returned within a couple of seconds of the server's status change.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.compat.conftest import SdkRun
from tests.support.llm import ScriptedLLM, call, text

pytestmark = [pytest.mark.e2e, pytest.mark.compat]

#: A blocking call returns within this long of the server's status change (issue 12).
PROMPT = 2.0


def terminal(command: str, **kw):  # noqa: ANN001, ANN201
    return call("terminal", command=command, security_risk="LOW", **kw)


def finish(message: str = "done", **kw):  # noqa: ANN201
    return call("finish", message=message, **kw)


def lag(run: SdkRun, returned: str, changed: str) -> float | None:
    if run.get(returned) is None or run.get(changed) is None:
        return None
    return run[returned] - run[changed]


def test_create_send_blocking_run(run_sdk, llm: ScriptedLLM, key: str, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    llm.script(
        key,
        terminal("echo hello-compat"),
        call(
            "file_editor",
            command="create",
            path=str(ws / "note.txt"),
            file_text="note\n",
            security_risk="LOW",
        ),
        finish("all three steps done"),
    )
    run = run_sdk("create_run.py", llm.base_url(key), workspace=ws)
    run.assert_ok()
    run.assert_valid_frames_and_events()
    frames = next(iter(run["frames"].values()))
    assert (
        frames["first_kind"] == "ConversationStateUpdateEvent"
        and frames["first_key"] == "full_state"
    ), frames
    assert lag(run, "run_returned", "status_finished_at") < PROMPT, run.get("status_changes")


def test_streaming_token_callbacks(run_sdk, llm: ScriptedLLM, key: str) -> None:
    llm.script(key, text("streamed-words-of-the-reply, spoken in pieces"), finish())
    run = run_sdk("streaming.py", llm.base_url(key))
    run.assert_ok()
    run.assert_valid_frames_and_events()


def test_completion_logs_reach_the_client_s_folder(run_sdk, llm: ScriptedLLM, key: str) -> None:
    llm.script(key, terminal("echo logged"), finish("logged both calls"))
    run = run_sdk("completion_logs.py", llm.base_url(key))
    run.assert_ok()
    run.assert_valid_frames_and_events()
    assert all(name.startswith("openai__test-model-") for name in run["files"]), run["files"]


def test_pause_during_blocking_run(run_sdk, llm: ScriptedLLM, key: str) -> None:
    llm.script(
        key,
        *[
            terminal(
                f"echo step-{i}",
                _text="",
            )
            for i in range(8)
        ],
        finish(),
    )
    for reply in llm.scripts[key]:
        reply.delay = 0.6
    run = run_sdk("pause.py", llm.base_url(key))
    run.assert_ok()
    run.assert_valid_frames_and_events()
    # Pause takes effect between steps: at most one step (a 0.6 s LLM answer and an echo) after
    # pause(); run() then returns within PROMPT.
    assert run["run_returned"] - run["pause_called"] < 1.0 + PROMPT, run.get("status_changes")


def test_always_confirm_accept_and_reject(run_sdk, llm: ScriptedLLM, key: str) -> None:
    llm.script(
        key,
        terminal("echo accepted-output"),
        terminal("echo reject-output # reject-me"),
        finish("finished after the rejection"),
    )
    run = run_sdk("confirm.py", llm.base_url(key))
    run.assert_ok()
    run.assert_valid_frames_and_events()
    assert "accept" in run["decisions"] and "reject" in run["decisions"], run["decisions"]
    slow = [w for w in run["waits"] if w["lag"] is None or w["lag"] > PROMPT]
    assert not slow, run["waits"]


def test_forced_websocket_reconnect(run_sdk, llm: ScriptedLLM, key: str) -> None:
    llm.script(
        key,
        terminal("echo before-drop"),
        terminal("echo after-drop"),
        terminal("echo later"),
        finish(),
    )
    for reply in llm.scripts[key]:
        reply.delay = 0.7
    run = run_sdk("reconnect.py", llm.base_url(key))
    run.assert_ok()
    run.assert_valid_frames_and_events()
    assert lag(run, "run_returned", "status_finished_at") < PROMPT, run.get("status_changes")


def test_attach_by_id_and_state_reads(run_sdk, llm: ScriptedLLM, key: str) -> None:
    llm.script(key, terminal("echo attach"), finish())
    run = run_sdk("attach.py", llm.base_url(key))
    run.assert_ok()
    run.assert_valid_frames_and_events()


@pytest.fixture
def git_workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    repo = ws / "repo"
    repo.mkdir(parents=True)
    env_git = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main"]
    subprocess.run([*env_git, "init", "-q"], cwd=repo, check=True)
    (repo / "tracked.txt").write_text("original\n")
    subprocess.run([*env_git, "add", "."], cwd=repo, check=True)
    subprocess.run([*env_git, "commit", "-qm", "init"], cwd=repo, check=True)
    (repo / "tracked.txt").write_text("changed\n")
    (repo / "new.txt").write_text("new\n")
    return ws


def test_workspace_calls(
    run_sdk, llm: ScriptedLLM, key: str, git_workspace: Path, compat_server
) -> None:
    # A conversation on this workspace for the conversation-scoped calls (created over plain
    # HTTP so that this test does not depend on the SDK's create).
    with compat_server.client() as c:
        r = c.post(
            "/api/conversations",
            json={
                "agent": {
                    "kind": "Agent",
                    "llm": {
                        "model": "openai/test-model",
                        "base_url": llm.base_url(key),
                        "api_key": "sk-test-key",
                    },
                    "tools": [{"name": "terminal"}],
                },
                "workspace": {"kind": "LocalWorkspace", "working_dir": str(git_workspace)},
            },
        )
        cid = r.json().get("id") if r.status_code in (200, 201) else None
    run = run_sdk(
        "workspace_calls.py", llm.base_url(key), workspace=git_workspace, conversation_id=cid
    )
    run.assert_ok()
    assert cid is not None, f"plain create failed: {r.status_code} {r.text[:300]}"


def test_fork_and_navigate(run_sdk, llm: ScriptedLLM, key: str) -> None:
    llm.script(
        key,
        text("first answer"),
        finish("first done"),
        text("second answer"),
        finish("second done"),
        text("branch answer"),
        finish("branch done"),
        text("third answer"),
        finish("third done"),
    )
    run = run_sdk("fork_navigate.py", llm.base_url(key))
    run.assert_ok()
    run.assert_valid_frames_and_events()


def test_reject_nothing_pending_ask_agent_security_analyzer(
    run_sdk, llm: ScriptedLLM, key: str
) -> None:
    llm.script(key, finish("hello back"), text("side-answer: I said hello"))
    run = run_sdk("misc_routes.py", llm.base_url(key))
    run.assert_ok()
    run.assert_valid_frames_and_events()
