"""AgentSession: our own agent for one conversation, built from narrow parts.

The conversation hands it a spec (who the agent is), a sink (where events go, masked), run
control (what the user steers), a Model and the shared tool services; the session never sees
the Conversation, and the conversation sees it only as the `contract.SteeredSession` it is.
Each run is a `loop.Run` over the session's parts (`RunParts`), not over the session.

    Conversation --calls--> AgentSession --appends--> EventSink --> EventLog --> View
                                 |                                               |
                                 '----- Run(RunParts) (agent.loop) reads <-------'
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from agent_server.agent.condenser import Condenser
from agent_server.agent.contract import ConversationSpec, RunControl, ToolServices
from agent_server.agent.critic import Critic
from agent_server.agent.hooks import Hooks
from agent_server.agent.llm_log import LoggedModel
from agent_server.agent.loop import Run, RunParts, hook_message, pending_actions
from agent_server.agent.model import Model
from agent_server.agent.prompt import SYSTEM_PROMPT, dynamic_context
from agent_server.agent.seams import SessionSeams
from agent_server.agent.sink import EventSink
from agent_server.agent.skills import SkillBook, SkillList, activation_text
from agent_server.agent.spec import AgentSpec
from agent_server.agent.toolbox import Toolbox
from agent_server.agent.usage import Metrics
from agent_server.agent.view import View
from agent_server.telemetry import AgentTelemetry, Telemetry
from events import MessageEvent, SystemPromptEvent, TextContent, UserRejectObservation
from events.content import text_of
from events.status import ExecutionStatus
from tools.base import ToolContext

#: How a side question (`ask`) is put to the model (the OpenHands SDK's wording).
ASK_TEMPLATE = """<QUESTION>
Based on the activity so far answer the following question

## Question
{}


<IMPORTANT>
This is a question, do not make any tool call and just answer my question.
</IMPORTANT>
</QUESTION>"""


class AgentSession:
    """Our own agent: the loop over the Model and the toolbox (a `contract.SteeredSession`)."""

    def __init__(
        self,
        spec: ConversationSpec,
        sink: EventSink,
        control: RunControl,
        model: Model,
        services: ToolServices,
        secrets: Mapping[str, str],
        metrics: Metrics,
        telemetry: Telemetry | None = None,
    ) -> None:
        # The factory gives an ACP agent its own kind of session.
        assert isinstance(spec.agent, AgentSpec), "AgentSession runs our own agent only"
        self.agent: AgentSpec = spec.agent
        self.spec, self.sink, self.control = spec, sink, control
        #: The model as given: a side question (`ask`) goes to it directly, leaving no event.
        self._unlogged = model
        #: Every other call of this conversation's LLMs goes through it: completion logs and
        #: token ids become events when the LLM's settings ask for them.
        self.model = LoggedModel(model, sink)
        #: Totals of LLM use; the conversation owns (and saves) the object, the loop adds.
        self.metrics = metrics
        #: Spans and counters of steps and tool calls (no-op spans without a telemetry).
        self.telemetry: AgentTelemetry = (telemetry or Telemetry.build()).agent(sink.masker.text)
        self.ctx = ToolContext(
            conversation_id=spec.id,
            working_dir=spec.working_dir,
            state_dir=spec.state_dir / "tools",
            secrets=secrets,
            env=spec.git_author,
            idle_timeout=services.idle_timeout,
            browser=services.browser,
            subagents=services.subagents(spec.id) if services.subagents else None,
            network=services.network,
        )
        #: The tools' view of this session: models, history, work for idle moments.
        self.seams = SessionSeams(
            spec.id, control, self.model, sink, metrics, lambda: self._view, self.follow_llm
        )
        self.ctx.models = self.ctx.history = self.ctx.idle = self.seams
        self.hooks = Hooks(spec.hook_config, spec.id, spec.working_dir, secrets, sink.append)
        self.condenser = Condenser(self.agent.condenser, lambda: control.llm.config, self.model)
        self.toolbox = Toolbox(self.ctx, self.agent, sink.append)
        self.critic = Critic(
            self.agent.critic, self.model, spec.id, spec.working_dir, secrets, sink.masker
        )
        #: SessionStart hooks ran in this process (SessionEnd runs only after them); only
        #: `_start_session` and `close` change it.
        self._session_started = False
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
        await self.sink.append(
            SystemPromptEvent(
                system_prompt=TextContent(text=SYSTEM_PROMPT),
                tools=definitions,
                dynamic_context=TextContent(
                    text=dynamic_context(
                        self.spec.working_dir, [d.title for d in definitions], book.skills
                    )
                ),
            )
        )
        if errors:
            await self.sink.append(*errors)
        self.model.prewarm()

    async def run(self, approved: bool = False) -> ExecutionStatus:
        """One run until it ends; the status it ended in (the conversation applies it)."""
        self.seams.run_started()
        errors = await self.toolbox.start(await self._skills())
        if errors:
            await self.sink.append(*errors)
        view = await self._attach()
        status = await Run(self._parts(view), approved)()
        self.seams.run_ended()
        return status

    async def reject_pending(self, reason: str) -> None:
        """A UserRejectObservation for each action waiting for confirmation."""
        view = await self._attach()
        rejections = [
            UserRejectObservation(
                tool_name=event.tool_name,
                tool_call_id=event.tool_call_id,
                action_id=event.id or "",
                rejection_reason=reason,
            )
            for event, _ in await pending_actions(view, self.sink)
        ]
        if rejections:
            await self.sink.append(*rejections)

    async def prepare_user_message(self, event: MessageEvent) -> None:
        """A message containing a skill's trigger activates it: named, and its body carried."""
        for skill, trigger in (await self._skills()).activate(text_of(event.llm_message.content)):
            event.activated_skills.append(skill.name)
            event.extended_content.append(activation_text(skill, trigger))

    async def on_user_message(self, event: MessageEvent) -> bool:
        """UserPromptSubmit hooks; True when they blocked the message."""
        text = text_of(event.llm_message.content)
        outcome = await self.hooks.run(
            "UserPromptSubmit", message_id=event.id, details={"message": text, "prompt": text}
        )
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
            cut = next(
                (
                    i
                    for i, m in enumerate(messages)
                    if any(c["id"] in waiting for c in m.get("tool_calls") or ())
                ),
                len(messages),
            )
            messages = messages[:cut]
        messages.append(
            {"role": "user", "content": [{"type": "text", "text": ASK_TEMPLATE.format(question)}]}
        )
        llm = self.agent.llm.model_copy(update={"stream": False})
        reply = await self._unlogged.complete(llm, messages, self.toolbox.llm_tools())
        self.metrics.add(reply.usage, reply.cost, reply.latency)
        return reply.content

    async def follow_llm(self) -> None:
        """After a switch: whether the new model reads images decides what it is shown."""
        self.ctx.vision = await self.model.supports_vision(self.control.llm.config)
        if self._view is not None:
            self._view.vision = self.ctx.vision

    def forget_view(self) -> None:
        """HEAD moved to another branch: the next run builds the model's view anew."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._view = None

    async def close(self) -> None:
        """SessionEnd hooks (when SessionStart ran), then release the tools."""
        if self._session_started:
            self._session_started = False
            await self.hooks.run("SessionEnd")
        await self.seams.close()
        if self._unsubscribe is not None:
            self._unsubscribe()
        await self.toolbox.close()

    # -- internals ---------------------------------------------------------------------------

    def _parts(self, view: View) -> RunParts:
        return RunParts(
            model=self.model,
            toolbox=self.toolbox,
            view=view,
            sink=self.sink,
            control=self.control,
            hooks=self.hooks,
            condenser=self.condenser,
            critic=self.critic,
            metrics=self.metrics,
            telemetry=self.telemetry,
            max_iterations=self.spec.max_iterations,
            stuck_detection=self.spec.stuck_detection,
            start_session=self._start_session,
        )

    async def _start_session(self) -> None:
        """The SessionStart hooks, once in this process; what they add goes to the model."""
        if self._session_started:
            return
        self._session_started = True
        started = await self.hooks.run("SessionStart")
        if started.context:
            await self.sink.append(hook_message(f"[SessionStart hook] {started.context}"))

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
        # Loaded off the loop: until `loading` ends, only this thread touches the view.
        await asyncio.to_thread(lambda: view.load(log.read(branch)))
        view.on_events(backlog)
        loading = False
        self._view = view
        return view
