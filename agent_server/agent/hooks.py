"""Hooks: operator commands run around tool calls and conversation moments.

A hook is a shell command run in the workspace with a JSON description of the moment on
stdin. Exit 0 succeeds (stdout may hold JSON: `decision` allow or deny, `reason`,
`additionalContext`); exit 2, or a deny, blocks; any other failure is reported and does not
block. Every run becomes a HookExecutionEvent.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_server.agent.policies import HookConfig
from core.processes import Output, child_env, run_process
from events import HookExecutionEvent

#: Bytes of stdout and stderr kept from a hook (the rest is cut with a note).
OUTPUT_LIMIT = 16 * 1024


@dataclass
class HookOutcome:
    """What the hooks of one moment decided, together."""

    blocked: bool = False
    reason: str | None = None
    additional_context: list[str] | None = None

    @property
    def context(self) -> str | None:
        return "\n".join(self.additional_context) if self.additional_context else None


def _text(output: Output) -> str:
    text = output.head.decode(errors="replace")
    dropped = output.total - len(output.head)
    return text + (f"\n[... {dropped} more bytes cut]" if dropped else "")


async def _run_one(
    command: str, timeout: float, payload: dict[str, Any], cwd: str, env: dict[str, str]
) -> tuple[int, str, str, str | None]:
    """(exit code, stdout, stderr, error) of one hook command; never raises for its failures.

    It runs like a workspace command: whatever the hook started (a daemon too) is killed when
    it ends, times out or the caller is cancelled.
    """
    try:
        done = await run_process(
            ["/bin/sh", "-c", command],
            cwd,
            env,
            timeout,
            OUTPUT_LIMIT,
            stdin=json.dumps(payload).encode(),
        )
    except OSError as exc:
        return -1, "", "", f"could not start the hook: {exc}"
    if done.timed_out:
        return -1, "", "", f"timed out after {timeout:g}s"
    return done.exit_code, _text(done.stdout), _text(done.stderr), None


def _decision(stdout: str) -> dict[str, Any]:
    try:
        data = json.loads(stdout)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


class Hooks:
    """The hooks of one conversation, run in its workspace; each run becomes an event."""

    def __init__(
        self,
        config: HookConfig | None,
        conversation_id: str,
        working_dir: Path,
        secrets: Mapping[str, str],
        append: Callable[..., Awaitable[Any]],
    ) -> None:
        self.config = config
        self.conversation_id = conversation_id
        self.working_dir = working_dir
        #: The conversation's live secret values: a hook sees them as the terminal does.
        self.secrets = secrets
        self.append = append

    async def run(
        self,
        event_type: str,
        *,
        tool_name: str | None = None,
        action_id: str | None = None,
        message_id: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> HookOutcome:
        """Run the hooks configured for this moment, in order; a block stops the rest."""
        outcome = HookOutcome()
        if self.config is None:
            return outcome
        hooks = self.config.matching(event_type, tool_name)
        if not hooks:
            return outcome
        payload = {
            "conversation_id": self.conversation_id,
            "session_id": self.conversation_id,
            "hook_event_name": event_type,
            "event_type": event_type,
            "working_dir": str(self.working_dir),
            "tool_name": tool_name,
            **(details or {}),
        }
        # The server's own credentials stay out: a hook's output lands in events.
        env = child_env(self.secrets, {"AGENT_SERVER_CONVERSATION_ID": self.conversation_id})
        for hook in hooks:
            code, out, err, error = await _run_one(
                hook.command, hook.timeout, payload, str(self.working_dir), env
            )
            answer = _decision(out) if code == 0 else {}
            denied = str(answer.get("decision", "")).lower() in ("deny", "block")
            blocked = code == 2 or denied
            reason = answer.get("reason") if isinstance(answer.get("reason"), str) else None
            if blocked and reason is None:
                reason = err.strip() or f"blocked by hook: {hook.command}"
            context = answer.get("additionalContext")
            context = context if isinstance(context, str) and context else None
            if error is None and code not in (0, 2):
                error = f"exited with {code}"
            await self.append(
                HookExecutionEvent(
                    hook_event_type=event_type,  # type: ignore[arg-type]
                    hook_command=hook.command,
                    tool_name=tool_name,
                    success=code == 0 and error is None,
                    blocked=blocked,
                    exit_code=code,
                    stdout=out,
                    stderr=err,
                    reason=reason,
                    additional_context=context,
                    error=error,
                    action_id=action_id,
                    message_id=message_id,
                    hook_input=payload,
                )
            )
            if context:
                outcome.additional_context = [*(outcome.additional_context or []), context]
            if blocked:
                outcome.blocked, outcome.reason = True, reason
                break
        return outcome
