"""agent_server.agent.hooks: the Hooks class running real shell commands."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from agent_server.agent.hooks import Hooks
from agent_server.agent.policies import HookConfig
from events import Event, HookExecutionEvent


def hooks_for(
    tmp_path: Path,
    event_type: str,
    *commands: str,
    matcher: str = "*",
    timeout: float = 30,
    secrets: dict[str, str] | None = None,
) -> tuple[Hooks, list[HookExecutionEvent]]:
    config = HookConfig.model_validate(
        {
            event_type: [
                {
                    "matcher": matcher,
                    "hooks": [{"command": c, "timeout": timeout} for c in commands],
                }
            ]
        }
    )
    seen: list[HookExecutionEvent] = []

    async def append(*events: Event) -> list[Event]:
        seen.extend(e for e in events if isinstance(e, HookExecutionEvent))
        return list(events)

    tmp_path.mkdir(exist_ok=True)
    return Hooks(config, "conv-1", tmp_path, secrets or {}, append), seen


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


async def gone(pid: int, within: float = 10) -> bool:
    """Whether the process has ended (a SIGKILL takes effect soon, not synchronously)."""
    deadline = time.monotonic() + within
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_exit_2_blocks_with_stderr_as_the_reason(tmp_path: Path) -> None:
    hooks, seen = hooks_for(
        tmp_path, "PreToolUse", "echo 'not in prod' >&2; exit 2", "echo never-reached"
    )
    outcome = await hooks.run("PreToolUse", tool_name="terminal")
    assert (outcome.blocked, outcome.reason) == (True, "not in prod")
    [event] = seen  # a block stops the hooks after it
    assert (event.blocked, event.exit_code, event.success) == (True, 2, False)


async def test_a_json_deny_blocks_with_its_reason(tmp_path: Path) -> None:
    hooks, seen = hooks_for(
        tmp_path, "PreToolUse", """echo '{"decision": "deny", "reason": "policy says no"}'"""
    )
    outcome = await hooks.run("PreToolUse", tool_name="terminal")
    assert (outcome.blocked, outcome.reason) == (True, "policy says no")
    assert seen[0].exit_code == 0 and seen[0].success


async def test_additional_context_is_collected(tmp_path: Path) -> None:
    hooks, seen = hooks_for(
        tmp_path,
        "UserPromptSubmit",
        """echo '{"additionalContext": "the repo uses tabs"}'""",
        """echo '{"additionalContext": "and pytest"}'""",
    )
    outcome = await hooks.run("UserPromptSubmit")
    assert not outcome.blocked
    assert outcome.additional_context == ["the repo uses tabs", "and pytest"]
    assert outcome.context == "the repo uses tabs\nand pytest"
    assert [e.additional_context for e in seen] == ["the repo uses tabs", "and pytest"]


async def test_the_hook_reads_the_moment_on_stdin_in_the_workspace(tmp_path: Path) -> None:
    hooks, _ = hooks_for(
        tmp_path,
        "PreToolUse",
        "cat > payload.json; echo $SECRET_X > env.txt",
        secrets={"SECRET_X": "visible-to-hooks"},
    )
    await hooks.run("PreToolUse", tool_name="terminal", details={"tool_input": {"a": 1}})
    payload = json.loads((tmp_path / "payload.json").read_text())
    assert payload["hook_event_name"] == "PreToolUse"
    assert payload["tool_name"] == "terminal"
    assert payload["tool_input"] == {"a": 1}
    assert payload["conversation_id"] == "conv-1"
    assert (tmp_path / "env.txt").read_text() == "visible-to-hooks\n"


async def test_a_matcher_selects_by_tool_name(tmp_path: Path) -> None:
    hooks, seen = hooks_for(tmp_path, "PreToolUse", "exit 2", matcher="term.*")
    assert not (await hooks.run("PreToolUse", tool_name="think")).blocked
    assert seen == []
    assert (await hooks.run("PreToolUse", tool_name="terminal")).blocked


async def test_a_failing_hook_is_reported_and_does_not_block(tmp_path: Path) -> None:
    hooks, seen = hooks_for(tmp_path, "Stop", "exit 7")
    outcome = await hooks.run("Stop")
    assert not outcome.blocked
    assert (seen[0].exit_code, seen[0].error, seen[0].success) == (7, "exited with 7", False)


async def test_a_timeout_kills_the_hook_and_what_it_started(tmp_path: Path) -> None:
    hooks, seen = hooks_for(tmp_path, "Stop", "sleep 300 & echo $! > child.pid; wait", timeout=0.5)
    outcome = await hooks.run("Stop")
    assert not outcome.blocked
    assert seen[0].error == "timed out after 0.5s"
    assert await gone(int((tmp_path / "child.pid").read_text()))


@pytest.mark.parametrize(
    "start",
    [
        "sleep 300 >/dev/null 2>&1 &",  # in the hook's process group
        "setsid sleep 300 >/dev/null 2>&1 &",  # a new session: a real daemon
    ],
    ids=["background", "setsid"],
)
async def test_a_hook_that_daemonises_leaves_no_process(tmp_path: Path, start: str) -> None:
    hooks, seen = hooks_for(tmp_path, "SessionStart", f"{start} echo $! > child.pid; exit 0")
    outcome = await hooks.run("SessionStart")
    assert not outcome.blocked and seen[0].success
    pid = int((tmp_path / "child.pid").read_text())
    try:
        assert await gone(pid), "the hook's background process outlived it"
    finally:
        if alive(pid):
            os.kill(pid, 9)


async def test_no_config_runs_nothing(tmp_path: Path) -> None:
    async def append(*events: Any) -> list[Any]:
        raise AssertionError("no event without a hook")

    outcome = await Hooks(None, "c", tmp_path, {}, append).run("PreToolUse", tool_name="x")
    assert not outcome.blocked and outcome.additional_context is None
