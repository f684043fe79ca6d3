"""AgentSession: one conversation's agent, built from narrow parts.

The conversation hands it a spec (who the agent is), a sink (where events go, masked), run
control (pause and approval flags it sets), a Model and the shared tool services; the session
never sees the Conversation. The conversation calls only the methods of `Session`: `open`,
`run`, `reject_pending`, `prepare_user_message`, `on_user_message`, `skills`, `ask`,
`follow_llm`, `forget_view` and `close`. An ACP agent (`agent.kind` "ACPAgent") is the other
kind of session (`agent_server.agent.acp`); the factory picks one by the agent's kind.

    Conversation --calls--> AgentSession --appends--> EventSink --> EventLog --> View
                                 |                                               |
                                 '--------- Run (agent.loop) reads <-------------'
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agent_server.agent.condenser import Condenser
from agent_server.agent.critic import Critic
from agent_server.agent.hooks import Hooks
from agent_server.agent.llm_log import LoggedModel
from agent_server.agent.llms import ActiveLLM
from agent_server.agent.loop import Run
from agent_server.agent.model import Model
from agent_server.agent.prompt import SYSTEM_PROMPT, dynamic_context
from agent_server.agent.seams import SessionSeams
from agent_server.agent.sink import EventSink
from agent_server.agent.skills import SkillBook, SkillList, activation_text
from agent_server.agent.spec import (
    ACPAgentSpec,
    AgentSpec,
    ConfirmationPolicy,
    HookConfig,
)
from agent_server.agent.toolbox import Toolbox
from agent_server.agent.usage import Metrics
from agent_server.agent.view import View
from agent_server.status import ExecutionStatus
from agent_server.telemetry import AgentTelemetry, Telemetry
from events import (
    ActionEvent,
    AgentErrorEvent,
    Event,
    MessageEvent,
    SystemPromptEvent,
    TextContent,
    UserRejectObservation,
    parse_event,
)
from tools.base import ToolContext

if TYPE_CHECKING:
    from tools.browser.manager import BrowserManager
    from tools.conversation import Subagents


#: How a side question (`ask`) is put to the model (the OpenHands SDK's wording).
ASK_TEMPLATE = """<QUESTION>
Based on the activity so far answer the following question

## Question
{}


<IMPORTANT>
This is a question, do not make any tool call and just answer my question.
</IMPORTANT>
</QUESTION>"""


@dataclass(frozen=True)
class ConversationSpec:
    """What the agent knows of its conversation; fixed for the conversation's life."""

    id: str
    working_dir: Path
    #: The conversation's private directory (tools keep their files under it).
    state_dir: Path
    agent: AgentSpec | ACPAgentSpec
    max_iterations: int = 500
    stuck_detection: bool = True
    hook_config: HookConfig | None = None
    #: GIT_AUTHOR_* and GIT_COMMITTER_* for the processes the tools start (SPEC 5 rule 5).
    git_author: Mapping[str, str] = field(default_factory=dict)


@dataclass
class RunControl:
    """What the user steers while the agent works: set by the conversation, read by the loop."""

    confirmation_policy: ConfirmationPolicy
    #: The LLM in force (a switch by the agent or the user changes it for the next request).
    llm: ActiveLLM
    #: Set by a pause; the loop stops between steps when it sees it.
    pause_requested: bool = False
    #: Set by an accepted confirmation: the run first carries out the waiting actions.
    approved: bool = False
    #: Held while a user message waits for its UserPromptSubmit verdict: a running agent
    #: takes no request meanwhile.
    prompt_gate: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(frozen=True)
class ToolServices:
    """What every conversation's tools share, made once by the composition root."""

    idle_timeout: float = 600.0
    #: The server's one Chromium (made on first call); None: no browser tools here.
    browser: Callable[[], BrowserManager] | None = None
    #: Sub-agents of a conversation, by its id (child conversations on this server); None:
    #: task, delegate and workflow say sub-agents are not available.
    subagents: Callable[[str], Subagents] | None = None


class Session(Protocol):
    """What a conversation asks of its agent, whichever kind it is."""

    async def open(self) -> None:
        """The first events of a new conversation."""
        ...

    async def run(self) -> ExecutionStatus:
        """One run until it ends; the status it ended in (the conversation applies it)."""
        ...

    async def reject_pending(self, reason: str) -> None:
        """Reject what waits for confirmation."""
        ...

    async def prepare_user_message(self, event: MessageEvent) -> None:
        ...

    async def on_user_message(self, event: MessageEvent) -> bool:
        """The message is stored; True when it is blocked (it starts no run)."""
        ...

    async def skills(self) -> SkillList:
        ...

    async def ask(self, question: str) -> str:
        ...

    async def follow_llm(self) -> None:
        ...

    def forget_view(self) -> None:
        ...

    async def close(self) -> None:
        ...


class AgentSession:
    """Our own agent: the loop over the Model and the toolbox."""

    def __init__(self, spec: ConversationSpec, sink: EventSink, control: RunControl,
                 model: Model, services: ToolServices, secrets: Mapping[str, str],
                 metrics: Metrics, telemetry: Telemetry | None = None) -> None:
        # The factory gives an ACP agent its own kind of session.
        assert isinstance(spec.agent, AgentSpec), "AgentSession runs our own agent only"
        self.agent: AgentSpec = spec.agent
        #: Every call of this conversation's LLMs goes through it: completion logs and token
        #: ids become events when the LLM's settings ask for them.
        model = LoggedModel(model, sink)
        self.spec, self.sink, self.control, self.model = spec, sink, control, model
        #: Totals of LLM use; the conversation owns (and saves) the object, the loop adds.
        self.metrics = metrics
        #: Spans and counters of steps and tool calls (no-op spans without a telemetry).
        self.telemetry: AgentTelemetry = (telemetry or Telemetry.build()).agent(sink.masker.text)
        self.ctx = ToolContext(
            conversation_id=spec.id, working_dir=spec.working_dir,
            state_dir=spec.state_dir / "tools", secrets=secrets, env=spec.git_author,
            idle_timeout=services.idle_timeout, browser=services.browser,
            subagents=services.subagents(spec.id) if services.subagents else None,
        )
        #: The tools' view of this session: models, history, work for idle moments.
        self.seams = SessionSeams(self)
        self.ctx.models = self.ctx.history = self.ctx.idle = self.seams
        self.hooks = Hooks(spec.hook_config, spec.id, spec.working_dir, secrets, sink.append)
        self.condenser = Condenser(self.agent.condenser, lambda: control.llm.config, model)
        self.toolbox = Toolbox(self.ctx, self.agent, sink.append)
        self.critic = Critic(self.agent.critic, model, spec.id, spec.working_dir, secrets,
                             sink.masker)
        #: SessionStart hooks ran in this process (SessionEnd runs only after them).
        self.session_started = False
        self._book: SkillBook | None = None
        self._view: View | None = None
        self._unsubscribe: Callable[[], None] | None = None

    # -- what the conversation calls -------------------------------------------------------

    async def open(self) -> None:
        """The first event: the SystemPromptEvent, listing exactly the tools the agent has.

        MCP servers start first (their tools are listed); a server that fails is reported by a
        ServerErrorEvent right after the SystemPromptEvent.
        """
        book = await self._skills()
        errors = await self.toolbox.start(book)
        definitions = self.toolbox.definitions()
        await self.sink.append(SystemPromptEvent(
            system_prompt=TextContent(text=SYSTEM_PROMPT),
            tools=definitions,
            dynamic_context=TextContent(text=dynamic_context(
                self.spec.working_dir, [d.title for d in definitions], book.skills)),
        ))
        if errors:
            await self.sink.append(*errors)
        self.model.prewarm()

    async def run(self) -> ExecutionStatus:
        """One run until it ends; the status it ended in (the conversation applies it)."""
        self.seams.run_started()
        errors = await self.toolbox.start(await self._skills())
        if errors:
            await self.sink.append(*errors)
        await self._attach()
        status = await Run(self)()
        self.seams.run_ended()
        return status

    async def reject_pending(self, reason: str) -> None:
        """A UserRejectObservation for each action waiting for confirmation."""
        await self._attach()
        rejections = [
            UserRejectObservation(tool_name=event.tool_name, tool_call_id=event.tool_call_id,
                                  action_id=event.id or "", rejection_reason=reason)
            for event, _ in await self.pending_actions()
        ]
        if rejections:
            await self.sink.append(*rejections)

    async def prepare_user_message(self, event: MessageEvent) -> None:
        """A message containing a skill's trigger activates it: named, and its body carried."""
        text = "\n".join(c.text for c in event.llm_message.content if isinstance(c, TextContent))
        for skill, trigger in (await self._skills()).activate(text):
            event.activated_skills.append(skill.name)
            event.extended_content.append(activation_text(skill, trigger))

    async def on_user_message(self, event: MessageEvent) -> bool:
        """UserPromptSubmit hooks; True when they blocked the message."""
        text = "\n".join(c.text for c in event.llm_message.content if isinstance(c, TextContent))
        outcome = await self.hooks.run("UserPromptSubmit", message_id=event.id,
                                       details={"message": text, "prompt": text})
        return outcome.blocked

    async def skills(self) -> SkillList:
        return (await self._skills()).info()

    async def ask(self, question: str) -> str:
        """A side question answered from the model's view of the conversation, which it leaves
        as it was: no event, no status change; safe while a run goes on."""
        view = await self._attach()
        messages = view.request()
        if view.pending:  # a call without its result yet would make the request invalid
            waiting = {p.tool_call_id for p in view.pending.values()}
            cut = next((i for i, m in enumerate(messages)
                        if any(c["id"] in waiting for c in m.get("tool_calls") or ())),
                       len(messages))
            messages = messages[:cut]
        messages.append({"role": "user", "content": [{"type": "text",
                                                      "text": ASK_TEMPLATE.format(question)}]})
        llm = self.agent.llm.model_copy(update={"stream": False})
        # Not logged: a side question leaves no event.
        reply = await self.model.model.complete(llm, messages, self.toolbox.llm_tools())
        self.metrics.add(reply.usage, reply.cost, reply.latency)
        return reply.content

    def forget_view(self) -> None:
        """HEAD moved to another branch: the next run builds the model's view anew."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._view = None

    async def close(self) -> None:
        """SessionEnd hooks (when SessionStart ran), then release the tools."""
        if self.session_started:
            self.session_started = False
            await self.hooks.run("SessionEnd")
        await self.seams.close()
        if self._unsubscribe is not None:
            self._unsubscribe()
        await self.toolbox.close()

    # -- what the loop uses ------------------------------------------------------------------

    def current_view(self) -> View | None:
        """The view, when a run has attached it (tools read it between steps)."""
        return self._view

    async def follow_llm(self) -> None:
        """After a switch: whether the new model reads images decides what it is shown."""
        self.ctx.vision = await self.model.supports_vision(self.control.llm.config)
        if self._view is not None:
            self._view.vision = self.ctx.vision

    @property
    def view(self) -> View:
        assert self._view is not None, "the view is attached at the start of a run"
        return self._view

    async def pending_actions(self) -> list[tuple[ActionEvent, str | None]]:
        """The stored ActionEvents still waiting for a result, in call order."""
        log = await self.sink.log()
        out: list[tuple[ActionEvent, str | None]] = []
        for pending in list(self.view.pending.values()):
            line = log.get(pending.action_id)
            event = parse_event(line) if line is not None else None
            if isinstance(event, ActionEvent):
                out.append((event, None if event.action is not None else "Not executable."))
        return out

    async def repair(self, why: str) -> None:
        """Give every tool call still without a result an AgentErrorEvent."""
        await (await self.sink.log()).drain()  # a result being written now counts: no second one
        errors = [AgentErrorEvent(tool_name=p.tool_name, tool_call_id=p.tool_call_id, error=why)
                  for p in self.view.pending.values()]
        if errors:
            await self.sink.append(*errors)

    # -- internals ---------------------------------------------------------------------------

    async def _skills(self) -> SkillBook:
        if self._book is None:
            self._book = await asyncio.to_thread(SkillBook.of, self.spec.working_dir)
        return self._book

    async def _attach(self) -> View:
        """The view of the current branch (root to HEAD), kept current by a subscription from
        then on: whatever is appended hangs off HEAD, so it extends that branch."""
        if self._view is not None:
            return self._view
        self.ctx.vision = await self.model.supports_vision(self.control.llm.config)
        log = await self.sink.log()
        view = View(vision=self.ctx.vision)
        backlog: list[Any] = []
        loading = True

        def listener(written: Any) -> None:
            if loading:
                backlog.extend(written)
            else:
                view.on_events(written)

        await log.drain()  # HEAD and its ancestors indexed; nothing awaits from here to subscribe
        branch = log.branch(log.head)
        self._unsubscribe = log.subscribe(listener)
        events: list[Event] = await asyncio.to_thread(
            lambda: [parse_event(x) for x in log.read(branch)])
        for event in events:
            view.add(event)
        view.on_events(backlog)
        loading = False
        self._view = view
        return view


#: Builds the session of one conversation (the composition root supplies model and services).
SessionFactory = Callable[[ConversationSpec, EventSink, RunControl, Mapping[str, str], Metrics],
                          Session]


def session_factory(model: Model, services: ToolServices,
                    telemetry: Telemetry | None = None) -> SessionFactory:
    def make(spec: ConversationSpec, sink: EventSink, control: RunControl,
             secrets: Mapping[str, str], metrics: Metrics) -> Session:
        if isinstance(spec.agent, ACPAgentSpec):
            # Imported here: the ACP session builds on this module's parts.
            from agent_server.agent.acp import ACPSession

            return ACPSession(spec, sink, control, secrets, services)
        return AgentSession(spec, sink, control, model, services, secrets, metrics, telemetry)

    return make
