"""Sub-agents as child conversations: tools.conversation.Subagents over ConversationService.

A child is an ordinary conversation of this server (its own id, log and meta.json, seen by
every route) whose record names its parent in `parent_conversation_id`. It gets the parent's
workspace, current LLM (and profile), confirmation policy, hooks and own secrets (the
settings' secrets reach it as they reach every conversation), and the tool sets the calling
tool chose among the parent's, with the parent's params. The call runs it to the end of its
run and reads its answer from its log. Cancelling the call (the parent interrupted or
deleted) interrupts the child.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator
from uuid import UUID

from agent_server.agent.spec import AgentSpec
from agent_server.agent.toolbox import canonical
from agent_server.conversations import Conversation, ConversationService
from agent_server.errors import ConversationGone
from agent_server.record import CreateConversation, RequestText, SendMessage
from tools.conversation import SubagentRefused, SubagentResult, SubagentTask, bounded

logger = logging.getLogger(__name__)

#: Bounds no tool params can lift: how deep children nest and how many one parent makes.
HARD_MAX_DEPTH = 5
HARD_MAX_CHILDREN = 100
#: Events read back from the end of a child's log to find its answer.
ANSWER_SCAN = 200


class SubagentHub:
    """The sub-agents of a catalogue's conversations (made as the catalogue is, for the
    factory of its sessions). Calling it gives the Subagents of one parent conversation.

    It also holds the server-wide cap: the per-parent bounds multiply down a tree (20-wide
    delegation made 1,212 conversations in two minutes), so all sub-agents together are
    counted too, those being created included (a check and its creation are apart by awaits,
    and twenty calls may check at once)."""

    def __init__(self, service: ConversationService, cap: int = 200) -> None:
        self.service = service
        self.cap = cap
        self.creating = 0

    def __call__(self, parent_id: str) -> ConversationSubagents:
        return ConversationSubagents(self.service, UUID(parent_id), self)

    @contextlib.contextmanager
    def place(self) -> Iterator[None]:
        """A place for one more sub-agent while it is created; SubagentRefused past the cap."""
        made = sum(1 for c in self.service if c.record.parent_conversation_id is not None)
        if made + self.creating >= self.cap:
            raise SubagentRefused(
                f"This server runs its most sub-agents ({self.cap}) already; "
                "finish with fewer, or resume one of them."
            )
        self.creating += 1
        try:
            yield
        finally:
            self.creating -= 1


class ConversationSubagents:
    def __init__(
        self, service: ConversationService, parent_id: UUID, hub: SubagentHub | None = None
    ) -> None:
        self._service = service
        self.parent_id = parent_id
        self._hub = hub or SubagentHub(service)

    def _parent(self) -> Conversation:
        parent = self._service.get(self.parent_id)
        if parent is None:
            raise SubagentRefused("This conversation is being deleted.")
        return parent

    def depth(self) -> int:
        depth, seen = 0, {self.parent_id}
        conv = self._service.get(self.parent_id)
        while conv is not None and conv.record.parent_conversation_id is not None:
            up = conv.record.parent_conversation_id
            if up in seen or depth > HARD_MAX_DEPTH:
                break
            seen.add(up)
            depth += 1
            conv = self._service.get(up)
        return depth

    def tool_names(self) -> list[str]:
        return [canonical(t.name) for t in self._parent().record.agent.tools]

    def spawned(self) -> int:
        return len(self._service.children(self.parent_id))

    async def run(self, task: SubagentTask) -> SubagentResult:
        parent = self._parent()
        unknown = set(task.tools) - set(self.tool_names())
        if unknown:
            raise SubagentRefused(
                "A sub-agent gets only tools this conversation has; not: "
                + ", ".join(sorted(unknown))
            )
        if task.resume is not None:
            child = self._child(task.resume)
            await child.send_message(SendMessage(content=[RequestText(text=task.prompt)], run=True))
        else:
            if self.depth() + 1 > HARD_MAX_DEPTH or self.spawned() >= HARD_MAX_CHILDREN:
                raise SubagentRefused("This server's limit of sub-agents is reached.")
            with self._hub.place():
                child = await self._create(parent, task)
        try:
            status = await child.wait_run()
        except asyncio.CancelledError:
            await asyncio.shield(_stop(child))
            raise
        return SubagentResult(
            conversation_id=child.id, status=status.value, text=await _answer(child, status.value)
        )

    def _child(self, raw: str) -> Conversation:
        try:
            child = self._service.get(UUID(raw))
        except ValueError:
            child = None
        if child is None or child.record.parent_conversation_id != self.parent_id:
            raise SubagentRefused(f"No sub-agent of this conversation has the id {raw!r}.")
        if child.running:
            raise SubagentRefused(f"The sub-agent {raw} is running already.")
        return child

    async def _create(self, parent: Conversation, task: SubagentTask) -> Conversation:
        record = parent.record
        all_tools = set(task.tools) == set(self.tool_names())
        agent = AgentSpec(
            llm=parent.control.llm.config,
            tools=[t for t in record.agent.tools if canonical(t.name) in task.tools],
            condenser=record.agent.condenser,
            mcp_config=record.agent.mcp_config if all_tools else None,
        )
        title = (task.title or task.prompt.strip().splitlines()[0])[:200]
        child, _ = await self._service.create(
            CreateConversation(
                agent=agent,
                workspace=record.workspace,
                secrets=dict(record.secrets),
                max_iterations=task.max_iterations,
                stuck_detection=record.stuck_detection,
                title=title,
                confirmation_policy=record.confirmation_policy,
                hook_config=record.hook_config,
                parent_conversation_id=record.id,
            )
        )
        if parent.control.llm.profile is not None:  # the child follows the same profile
            child.control.llm.profile = parent.control.llm.profile
            child.record.llm_profile = parent.control.llm.profile
        await child.send_message(SendMessage(content=[RequestText(text=task.prompt)], run=True))
        return child


async def _stop(child: Conversation) -> None:
    if child.running:
        with contextlib.suppress(Exception):
            await child.interrupt()


async def _answer(child: Conversation, status: str) -> str:
    """The child's finish message, else its last message to the user; masked by its log."""
    try:
        log = await child.log()
    except ConversationGone:
        return "The sub-agent's conversation was deleted."
    await log.drain()
    count = len(log)
    lines = await asyncio.to_thread(log.read, range(max(0, count - ANSWER_SCAN), count))
    answer = ""
    for line in reversed(lines):
        event = json.loads(line)
        if (
            event.get("kind") == "ActionEvent"
            and (event.get("action") or {}).get("kind") == "FinishAction"
        ):
            answer = event["action"].get("message", "")
            break
        if event.get("kind") == "MessageEvent" and event.get("source") == "agent":
            answer = "".join(c.get("text", "") for c in event["llm_message"]["content"])
            break
        if event.get("kind") == "ConversationErrorEvent" and not answer:
            answer = f"{event.get('code')}: {event.get('detail')}"
            break
    if status == "waiting_for_confirmation":
        answer += (
            f"\n(The sub-agent waits for confirmation of its actions: answer at "
            f"/api/conversations/{child.id}/events/respond_to_confirmation, then resume it.)"
        )
    return bounded(answer.strip())
