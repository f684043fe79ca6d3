"""delegate: named sub-agents working in parallel (OpenHands' DelegateTool).

`spawn` names sub-agents (and their types); `delegate` gives each named one a task, runs them
all at once and returns every report. A sub-agent's child conversation is made by its first
task; later tasks continue that same conversation, so it remembers what it did. The names
and their conversations are kept in the parent's state directory (a restart keeps them).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from core.files import read_json, write_json
from events.content import Strict
from events.tools.subagents import DelegateAction, DelegateObservation
from tools.base import TextContent, Tool, ToolError, run_in_thread
from tools.conversation import SubagentResult, SubagentTask, bounded
from tools.subagents.common import (
    agent_type,
    check_limits,
    child_tools,
    params_of,
    run_child,
    seam,
    types_text,
)

STORE_NAME = "delegates.json"
AGENT_ID = re.compile(r"^[A-Za-z0-9_.-]{1,50}$")
#: Characters of each sub-agent's report in the combined observation, and of all of them:
#: with many sub-agents each gets its share of the total (never under 1,000).
REPORT_CHARS, TOTAL_REPORT_CHARS = 8_000, 40_000


class _Agent(Strict):
    type: str
    conversation_id: str | None = None


class _Stored(Strict):
    version: Literal[1] = 1
    agents: dict[str, _Agent] = Field(default_factory=dict)


class DelegateTool(Tool):
    name = "delegate"
    description = (
        "Run named sub-agents in parallel.\n"
        "* spawn: `ids` names new sub-agents; `agent_types` (same order) picks each one's type.\n"
        "* delegate: `tasks` maps spawned ids to a task each; they all run at once and you get "
        "every report when the last one is done. A sub-agent remembers its earlier tasks.\n"
        "Each works in the same workspace with a subset of your tools and sees only its task: "
        "say what to do and what to report. Types:\n" + types_text()
    )
    action_type = DelegateAction
    observation_type = DelegateObservation

    @property
    def _store(self) -> Path:
        return self.ctx.state_dir / STORE_NAME

    def _load(self) -> _Stored:
        try:
            return _Stored.model_validate(read_json(self._store))
        except FileNotFoundError:
            return _Stored()
        except (OSError, ValueError, ValidationError) as exc:
            raise ToolError(f"The list of sub-agents cannot be read: {exc}") from None

    def _save(self, stored: _Stored) -> None:
        write_json(self._store, stored.model_dump(mode="json"))

    async def run(self, action: DelegateAction) -> DelegateObservation:
        seam(self.ctx)
        if action.command == "spawn":
            text = await self._spawn(action)
        else:
            text = await self._delegate(action)
        failed = text.startswith("Every task failed")
        return DelegateObservation(
            command=action.command, content=[TextContent(text=text)], is_error=failed
        )

    async def _spawn(self, action: DelegateAction) -> str:
        ids = action.ids or []
        if not ids:
            raise ToolError("spawn needs `ids`: at least one name for a sub-agent.")
        if len(set(ids)) != len(ids):
            raise ToolError("`ids` names a sub-agent twice.")
        for agent_id in ids:
            if not AGENT_ID.match(agent_id):
                raise ToolError(
                    f"{agent_id!r} is not a sub-agent id: 1 to 50 letters, digits, '.', '_' or '-'."
                )
        types = list(action.agent_types or [])
        chosen = [agent_type(types[i] if i < len(types) else "")[0] for i in range(len(ids))]
        stored = await run_in_thread(self._load)
        taken = [i for i in ids if i in stored.agents]
        if taken:
            raise ToolError(
                f"Already spawned: {', '.join(taken)}. Give them tasks with "
                "delegate, or spawn other ids."
            )
        unstarted = sum(1 for a in stored.agents.values() if a.conversation_id is None)
        check_limits(seam(self.ctx), params_of(self.params), len(ids) + unstarted)
        for agent_id, type_name in zip(ids, chosen):
            stored.agents[agent_id] = _Agent(type=type_name)
        await run_in_thread(self._save, stored)
        listed = ", ".join(f"{i} ({t})" for i, t in zip(ids, chosen))
        return f"Spawned {len(ids)} sub-agent(s): {listed}. Give them tasks with delegate."

    async def _delegate(self, action: DelegateAction) -> str:
        tasks = action.tasks or {}
        if not tasks:
            raise ToolError("delegate needs `tasks`: a task for at least one spawned sub-agent.")
        stored = await run_in_thread(self._load)
        unknown = [i for i in tasks if i not in stored.agents]
        if unknown:
            raise ToolError(
                f"Not spawned: {', '.join(unknown)}. Spawn them first"
                + (f" (spawned: {', '.join(stored.agents)})." if stored.agents else ".")
            )
        subagents, params = seam(self.ctx), params_of(self.params)
        work = []
        for agent_id, text in tasks.items():
            agent = stored.agents[agent_id]
            _, kind = agent_type(agent.type)
            prompt = text if agent.conversation_id else f"{kind.brief}\n\n{text}"
            work.append(
                SubagentTask(
                    prompt=prompt,
                    tools=child_tools(subagents, kind, params),
                    title=f"{agent_id}: {text[:80]}",
                    resume=agent.conversation_id,
                    max_iterations=params.max_iterations,
                )
            )
        # All at once; cancelling this call cancels every one (and so interrupts its child).
        results = await asyncio.gather(
            *(run_child(subagents, t) for t in work), return_exceptions=True
        )
        reports, failures = [], 0
        share = max(1_000, min(REPORT_CHARS, TOTAL_REPORT_CHARS // len(tasks)))
        for agent_id, result in zip(tasks, results):
            if isinstance(result, asyncio.CancelledError):
                raise result
            if isinstance(result, SubagentResult):
                stored.agents[agent_id].conversation_id = result.conversation_id
                status = "completed" if result.ok else f"stopped: {result.status}"
                failures += not result.ok
                reports.append(
                    f"## {agent_id} ({status}, conversation {result.conversation_id})"
                    f"\n{bounded(result.text, share)}"
                )
            else:
                failures += 1
                reports.append(f"## {agent_id} (failed)\n{bounded(str(result), share)}")
        await run_in_thread(self._save, stored)
        head = (
            "Every task failed."
            if failures == len(tasks)
            else f"{len(tasks) - failures} of {len(tasks)} task(s) completed."
        )
        return head + "\n\n" + "\n\n".join(reports)
