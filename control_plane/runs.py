"""The runs in a sandbox, over HTTP to its agent server: paused before the sandbox is frozen,
continued when it is thawed.

A run frozen mid-step (SIGSTOP, a container paused) would find its model call or tool timed out
when it wakes; so a pause first asks the agent server to pause each running conversation (it
stops between steps) and waits for that, `pause_grace` seconds at most, then the sandbox is
frozen. Those it paused are marked (`resume_run`), and go on when the sandbox resumes.
"""

from __future__ import annotations

import asyncio
import logging

from control_plane.agent_client import AgentClient, AgentError, Target
from control_plane.store import Database, conversations
from events.status import ExecutionStatus

logger = logging.getLogger(__name__)


class Runs:
    def __init__(self, db: Database, agents: AgentClient, *, pause_grace: float = 30.0) -> None:
        self.db = db
        self.agents = agents
        self.pause_grace = pause_grace

    async def pause(self, sandbox_id: str, target: Target) -> None:
        """Ask the agent server to pause each running conversation, and wait (bounded) until
        none runs; those it paused are marked to go on when the sandbox resumes."""
        agents = self.agents

        async def running(conversation_id: str) -> bool:
            try:
                info = await agents.get_conversation(target, conversation_id)
            except AgentError:
                return False  # not there (never created, deleted): nothing to pause
            return ExecutionStatus.parse(info.get("execution_status")) is ExecutionStatus.RUNNING

        ids = await conversations.in_sandbox(self.db, sandbox_id)
        flags = await asyncio.gather(*(running(c) for c in ids))
        busy = [c for c, flag in zip(ids, flags) if flag]
        for conversation_id in busy:
            try:
                await agents.post(target, f"/api/conversations/{conversation_id}/pause")
            except AgentError as exc:
                logger.warning("pausing conversation %s failed: %s", conversation_id, exc)
            await conversations.update_fields(
                self.db, conversation_id, touch=False, resume_run=True
            )
        deadline = asyncio.get_running_loop().time() + self.pause_grace
        while busy and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
            flags = await asyncio.gather(*(running(c) for c in busy))
            busy = [c for c, flag in zip(busy, flags) if flag]
        if busy:
            logger.info(
                "sandbox %s frozen with %d run(s) mid-step after %g s",
                sandbox_id,
                len(busy),
                self.pause_grace,
            )

    async def resume(self, sandbox_id: str, target: Target) -> None:
        """Continue the runs `pause` paused (each once: the mark goes whatever the answer)."""
        for conversation_id in await conversations.to_resume(self.db, sandbox_id):
            try:
                await self.agents.post(target, f"/api/conversations/{conversation_id}/run")
            except AgentError as exc:
                logger.warning("continuing the run of %s failed: %s", conversation_id, exc)
            await conversations.update_fields(
                self.db, conversation_id, touch=False, resume_run=False
            )
