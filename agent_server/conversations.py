"""ConversationService (the catalogue) and Conversation (one conversation's state and run).

Start-up reads only each conversation's meta.json; a conversation's event log is opened the
first time something needs it. A Conversation owns its execution status (moved only through
the TRANSITIONS table), its lifecycle and at most one run task; what a run does is its
AgentSession's business, built for it by the factory the composition root hands in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import traceback
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any, Protocol
from uuid import UUID

from pydantic import ValidationError

from agent_server.agent.llms import ActiveLLM
from agent_server.agent.session import ConversationSpec, RunControl, Session, SessionFactory
from agent_server.agent.sink import EventSink
from agent_server.agent.skills import SkillList
from agent_server.agent.spec import (
    ACPAgentSpec,
    AgentSpec,
    ConfirmationPolicy,
    LLMConfig,
)
from agent_server.agent.toolbox import check_tools
from agent_server.errors import ConversationGone
from agent_server.log import LOG_FILE_NAME, EventLog, Listener
from agent_server.record import (
    ConversationInfo,
    ConversationSearch,
    CreateConversation,
    ForkRequest,
    SendMessage,
    StoredConversation,
    WebhookStatus,
    Workspace,
    secret_values,
)
from agent_server.repository import CloneFailed, clone
from agent_server.settings import Settings
from agent_server.status import ExecutionStatus, check_move
from agent_server.telemetry import Telemetry
from agent_server.telemetry import logs as log_context
from agent_server.telemetry.tracing import ConversationTrace, failed
from core.files import read_json, write_atomic, write_json
from core.ids import new_event_id
from core.masking import Masker, check_secrets
from events import (
    ConversationErrorEvent,
    ConversationStateUpdateEvent,
    Event,
    InterruptEvent,
    Message,
    MessageEvent,
    PauseEvent,
    format_timestamp,
)
from web.errors import Conflict, NotFound, invalid

logger = logging.getLogger(__name__)

S = ExecutionStatus


class Lifecycle(Enum):
    """OPEN takes requests; CLOSING (deletion or shutdown begun) starts no run but may still
    write (SessionEnd hooks); CLOSED writes nothing."""

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class Fanout(Protocol):
    """Where a conversation's events go besides its log (delivery implements it)."""

    def sinks(self, conversation_id: str) -> Sequence[Listener]:
        """Listeners of the log's durable writes (websocket subscribers)."""
        ...

    def attach(self, conversation_id: str, directory: Path, log: EventLog,
               closed: asyncio.Event) -> None:
        """Called once the log is open (the webhook pusher reads from it)."""
        ...

    def publish_transient(self, conversation_id: str, event: Event) -> None:
        ...

    async def delivered(self, conversation_id: str) -> None:
        """Until the live subscribers' sockets carry what was published (bounded)."""
        ...

    def forget(self, conversation_id: str) -> None:
        """The conversation was deleted."""
        ...

    def status(self, conversation_id: str) -> WebhookStatus | None:
        """The webhook push of the conversation, when there is a webhook."""
        ...


def now() -> datetime:
    return datetime.now(UTC)


class Conversation:
    """One conversation: its record, its log, its status, its run task and its session."""

    def __init__(self, record: StoredConversation, directory: Path, *,
                 settings: Callable[[], Settings], make_session: SessionFactory,
                 fanout: Fanout, telemetry: Telemetry | None = None) -> None:
        self.record = record
        self.directory = directory
        self._settings = settings
        self._fanout = fanout
        self.telemetry = telemetry or Telemetry.build()
        self._log: EventLog | None = None
        self._log_lock = asyncio.Lock()
        self._save_lock = asyncio.Lock()
        #: Held while a run is being started or stopped.
        self._run_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.lifecycle = Lifecycle.OPEN
        #: Set once the conversation is closed (deleted or the server stopped): sockets and
        #: the webhook pusher wait on it instead of polling.
        self.closed = asyncio.Event()
        #: The secret values in force (settings', then the conversation's own); one live dict
        #: that tools and hooks read, kept current by refresh_secrets().
        self.secret_values: dict[str, str] = {}
        self.masker = Masker(self.secret_values)  # follows the live dict
        self.refresh_secrets()
        #: Where this conversation's spans hang (its root span starts in `start_trace` when
        #: it is new; one loaded from disk continues the trace its record names).
        self.trace: ConversationTrace = self.telemetry.tracing.resumed(record.trace, self.id)
        llm = ActiveLLM(record.agent.llm, record.llm_profile,
                        lambda: self._settings().llm_profiles)
        llm.on_change = self._llm_changed
        self.control = RunControl(confirmation_policy=record.confirmation_policy, llm=llm)
        self.session: Session = make_session(
            ConversationSpec(
                id=self.id, working_dir=self.working_dir, state_dir=directory,
                agent=record.agent, max_iterations=record.max_iterations,
                stuck_detection=record.stuck_detection, hook_config=record.hook_config,
                git_author=settings().git_author(),
            ),
            EventSink(self.log, lambda event: fanout.publish_transient(self.id, event),
                      self.masker),
            self.control, self.secret_values, record.metrics,
        )

    @property
    def id(self) -> str:
        return str(self.record.id)

    @property
    def status(self) -> ExecutionStatus:
        return self.record.execution_status

    @property
    def working_dir(self) -> Path:
        return Path(self.record.workspace.working_dir)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def webhook_status(self) -> WebhookStatus | None:
        return self._fanout.status(self.id)

    def info(self) -> ConversationInfo:
        """The conversation as the API shows it. The tree's fields (HEAD, the last user
        message) come from the log, so they are given only while it is open (`opened_info`)."""
        log, leaf, last_user = self._log, None, None
        if log is not None:
            leaf = log.head
            last_user = log.last_on_branch(leaf, "MessageEvent", "user")
        elif self.record.head_set_at is not None:
            leaf = self.record.head_event_id
        return ConversationInfo.of(
            self.record, directory=str(self.directory), webhook=self.webhook_status(),
            leaf=leaf, head_is_empty=leaf is None and log is not None and len(log) > 0,
            last_user_message=last_user)

    async def opened_info(self) -> ConversationInfo:
        await self.log()
        return self.info()

    def publish_state(self) -> None:
        """A `full_state` ConversationStateUpdateEvent to the live subscribers (not stored):
        what the OpenHands SDK client waits for when a run ends."""
        self._fanout.publish_transient(self.id, self.state_event())

    async def announce(self, *fields: str) -> None:
        """Publish a change a client asked for, and answer it only once the sockets carry it:
        the OpenHands SDK reads its state from what the socket brought. With `fields`, one
        small update per field (the client takes them quicker), else the full state."""
        if fields:
            value = self.masker.data(self.info().model_dump(mode="json", include=set(fields)))
            for name in fields:
                self._fanout.publish_transient(self.id, ConversationStateUpdateEvent(
                    id=new_event_id(), timestamp=format_timestamp(now()), key=name,
                    value=value.get(name)))
        else:
            self.publish_state()
        await self._fanout.delivered(self.id)

    def state_event(self) -> ConversationStateUpdateEvent:
        return ConversationStateUpdateEvent(
            id=new_event_id(), timestamp=format_timestamp(now()), key="full_state",
            value=self.masker.data(self.info().model_dump(mode="json", exclude_none=True)))

    # -- secrets -------------------------------------------------------------------------------

    def refresh_secrets(self) -> None:
        merged = {**self._settings().secrets, **self.record.secrets}
        self.secret_values.clear()
        self.secret_values.update(merged)

    async def add_secrets(self, values: dict[str, str]) -> None:
        for name, problem in check_secrets(values):
            raise invalid(["secrets", name], problem)
        self.record.secrets.update(values)
        self.refresh_secrets()
        await self.save()
        await self.announce()

    # -- persistence ---------------------------------------------------------------------

    async def log(self) -> EventLog:
        if self.lifecycle is Lifecycle.CLOSED:
            raise ConversationGone(self.id)
        if self._log is None:
            async with self._log_lock:
                if self._log is None:
                    log = await asyncio.to_thread(
                        EventLog.open, self.directory / LOG_FILE_NAME,
                        redactor=self.masker.data, sinks=self._fanout.sinks(self.id),
                        on_write=self.telemetry.metrics.log_written)
                    if self.record.head_set_at is not None:
                        log.restore_head(self.record.head_event_id, self.record.head_set_at)
                    self._log = log
                    self._fanout.attach(self.id, self.directory, log, self.closed)
        return self._log

    async def append(self, *events: Event) -> list[Event]:
        return await (await self.log()).append(*events)

    async def save(self) -> None:
        if self.lifecycle is Lifecycle.CLOSED:  # a deleted conversation must not come back
            return
        async with self._save_lock:  # one writer at a time, each writing the latest record
            self.record.updated_at = now()
            data = self.record.model_dump(mode="json")
            await asyncio.to_thread(write_json, self.directory / "meta.json", data)

    async def update(self, *, title: str | None = None, clear_title: bool = False,
                     tags: dict[str, str] | None = None) -> None:
        if title is not None or clear_title:
            self.record.title = title
        if tags is not None:
            self.record.tags = tags
        await self.save()
        await self.announce()

    async def _llm_changed(self) -> None:
        self.record.agent.llm = self.control.llm.stored
        self.record.llm_profile = self.control.llm.profile
        await self.save()

    async def switch_profile(self, name: str, reason: str = "") -> None:
        """The user's switch to a saved profile (from the next request on); KeyError when
        no profile has that name."""
        await self.append(await self.control.llm.switch_profile(name, reason, "user"))
        await self.session.follow_llm()

    async def switch_llm(self, config: LLMConfig, reason: str = "") -> None:
        await self.append(await self.control.llm.switch_llm(config, reason, "user"))
        await self.session.follow_llm()

    async def rotate_llm_key(self, key: str) -> None:
        await self.append(await self.control.llm.rotate_key(key))

    async def set_confirmation_policy(self, policy: ConfirmationPolicy) -> None:
        self.record.confirmation_policy = self.control.confirmation_policy = policy
        await self.save()
        await self.announce("confirmation_policy")

    async def set_security_analyzer(self, analyzer: dict[str, Any] | None) -> None:
        self.record.security_analyzer = analyzer
        await self.save()
        await self.announce("security_analyzer")

    async def transition(self, to: ExecutionStatus) -> None:
        """Move the execution status along the table (staying put is no move), record it as
        an event and save; any other move raises InvalidTransition."""
        current = self.record.execution_status
        if to == current:
            return
        check_move(current, to)
        self.record.execution_status = to
        await self.append(ConversationStateUpdateEvent(key="execution_status", value=to.value))
        await self.save()
        if to != S.RUNNING:  # a run ended (or never will): the snapshot clients wait for
            self.publish_state()

    # -- the conversation tree -------------------------------------------------------------

    async def navigate(self, event_id: str | None) -> None:
        """Move HEAD to a stored event (None: the empty tree): the next event starts a sibling
        branch there, and the model sees only the branch from the root to HEAD."""
        async with self._run_lock:
            await self.settle()
            if self.running:
                raise Conflict("The conversation is running: pause it before navigating")
            log = await self.log()
            await log.drain()
            try:
                log.navigate(event_id)
            except KeyError:
                raise NotFound(f"Event {event_id} not found in this conversation") from None
            self.record.head_event_id, self.record.head_set_at = event_id, len(log)
            self.session.forget_view()
            if self.status == S.WAITING_FOR_CONFIRMATION:  # what waited is off the branch now
                await self.transition(S.IDLE)
            await self.save()
        await self.announce("leaf_event_id", "head_is_empty", "last_user_message_id")

    # -- control -------------------------------------------------------------------------

    async def settle(self) -> None:
        """Wait for a run that has set its final status but whose task is still ending."""
        task = self._task
        if task is not None and not task.done() and self.status != S.RUNNING:
            await asyncio.gather(asyncio.shield(task), return_exceptions=True)

    async def open(self) -> None:
        """The first events of a new conversation (the SystemPromptEvent)."""
        await self.session.open()

    async def send_message(self, message: SendMessage) -> MessageEvent:
        await self.settle()
        if self.status == S.WAITING_FOR_CONFIRMATION and not self.running:
            # A new message never approves what waits: it rejects it.
            await self.session.reject_pending("superseded by a new user message")
            await self.transition(S.IDLE)
        event = MessageEvent(
            source="user",
            llm_message=Message(role="user", content=message.contents()),
            sender=message.sender,
        )
        await self.session.prepare_user_message(event)
        # A running agent takes no request while the message waits for its hooks' verdict.
        async with self.control.prompt_gate:
            await self.append(event)
            blocked = await self.session.on_user_message(event)
        if message.run and not blocked:
            await self.run()
        return event

    async def respond(self, accept: bool, reason: str) -> None:
        """Run the actions waiting for confirmation (accept), or reject them and rest.

        Rejecting when nothing waits changes nothing (as the OpenHands agent server answers
        it); accepting then is a conflict, since it would not run anything."""
        await self.settle()
        if self.status != S.WAITING_FOR_CONFIRMATION or self.running:
            if not accept:
                return
            raise Conflict("No action is waiting for confirmation "
                           f"(execution_status is {self.status.value})")
        if accept:
            await self.run(approved=True)
        else:
            await self.session.reject_pending(reason)
            await self.transition(S.IDLE)

    async def run(self, approved: bool = False) -> None:
        """Start the agent unless it is already running (then nothing changes).

        A run while actions wait for confirmation runs them first: calling run again is how
        the OpenHands SDK accepts (as its agent server does). A new user message, by contrast,
        rejects them (send_message).
        """
        async with self._run_lock:  # one run task at a time, even for calls made together
            if self.lifecycle is not Lifecycle.OPEN or (self.running and self.status == S.RUNNING):
                return
            await self.settle()
            if self.running:
                return
            self.control.approved = approved or self.status == S.WAITING_FOR_CONFIRMATION
            self.control.pause_requested = False
            await self.transition(S.RUNNING)
            self._task = asyncio.create_task(self._run(), name=f"run {self.id}")

    def start_trace(self) -> None:
        """A new conversation's root span (and named span), its place kept in the record."""
        record = self.record
        self.trace = self.telemetry.tracing.conversation(
            self.id, span_name=record.observability_span_name, tags=record.observability_tags,
            metadata=record.observability_metadata, mask=self.masker.text,
            parent_conversation_id=(str(record.parent_conversation_id)
                                    if record.parent_conversation_id else None))
        record.trace = self.trace.ref

    async def _run(self) -> None:
        log_context.set_conversation(self.id)  # this task's log records name the conversation
        try:
            with self.trace.run() as span:
                if await self._prepare_workspace():
                    status = await self.session.run()
                    span.set_attribute("agent_server.run.status", status.value)
                    if status in (S.ERROR, S.STUCK):
                        failed(span, status.value)
                    await self.transition(status)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the session failed itself: say so, never leave it "running"
            # The traceback may quote a secret (an exception's message): masked like events.
            logger.error("run of %s failed\n%s", self.id,
                         self.masker.text("".join(traceback.format_exception(exc)))[-20_000:])
            await self._fail(type(exc).__name__, str(exc))

    async def _prepare_workspace(self) -> bool:
        """Clone the selected repository before the first step (once); False when it failed."""
        spec = self.record.repository
        if spec is None or self.record.repository_status == "cloned":
            return True
        try:
            await clone(spec, self.working_dir, self.secret_values, self.masker,
                        self._settings().git_author())
        except CloneFailed as failure:
            self.record.repository_status = "failed"
            await self._fail("RepositoryCloneFailed", failure.detail)
            return False
        self.record.repository_status = "cloned"
        await self.save()
        return True

    async def _fail(self, code: str, detail: str) -> None:
        """End the run in ERROR with a ConversationErrorEvent (masked, then cut)."""
        try:
            await self.append(ConversationErrorEvent(source="environment", code=code,
                                                     detail=self.masker.text(detail)[:2000]))
        except Exception:
            logger.exception("recording the failure of %s failed", self.id)
        try:
            await self.transition(S.ERROR)
        except Exception:  # the log cannot take it: the record says it at least
            self.record.execution_status = S.ERROR
            with contextlib.suppress(Exception):
                await self.save()

    async def pause(self) -> None:
        """Takes effect between steps (SPEC 3.3)."""
        await self.append(PauseEvent())
        if self.running:
            self.control.pause_requested = True

    async def interrupt(self) -> None:
        """Cancels the in-flight LLM call or tool at once (SPEC 3.3)."""
        await self.append(InterruptEvent())
        async with self._run_lock:  # a run being started now is cancelled, not missed
            await self.stop()
            if self.status == S.RUNNING:
                await self.transition(S.PAUSED)

    async def wait_run(self) -> ExecutionStatus:
        """Wait for the run task, if any, to end; the status it left."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.gather(asyncio.shield(task), return_exceptions=True)
        return self.status

    async def stop(self) -> None:
        """Cancel the run task, if any, and wait for its clean-up."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def skills(self) -> SkillList:
        return await self.session.skills()

    async def ask(self, question: str) -> str:
        """A side question, answered without adding to the conversation (LLMFailure: 502)."""
        answer = await self.session.ask(self.masker.text(question))
        await self.save()  # the call's cost is counted
        return self.masker.text(answer)

    async def close(self) -> None:
        self.lifecycle = Lifecycle.CLOSING  # no new run from here on; SessionEnd may still write
        async with self._run_lock:
            await self.stop()
        try:
            await self.session.close()
        except Exception:
            logger.exception("closing the agent of %s failed", self.id)
        self.lifecycle = Lifecycle.CLOSED
        self.closed.set()
        self.trace.end()  # its root span ends (and is exported) with its life in this process
        if self._log is not None:
            await self._log.drain()
            self._log.close()
            self._log = None


def _write_log(directory: Path, data: bytes) -> None:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(directory / LOG_FILE_NAME, data)


class ConversationService:
    """The catalogue of conversations under state_dir/conversations."""

    def __init__(self, state_dir: Path, default_working_dir: Path, *,
                 settings: Callable[[], Settings], make_session: SessionFactory,
                 fanout: Fanout, telemetry: Telemetry | None = None) -> None:
        self.root = state_dir / "conversations"
        self.telemetry = telemetry or Telemetry.build()
        self.default_working_dir = default_working_dir
        self.settings = settings
        self._make_session = make_session
        self._fanout = fanout
        self._items: dict[UUID, Conversation] = {}
        self._create_lock = asyncio.Lock()

    def _conversation(self, record: StoredConversation, directory: Path) -> Conversation:
        return Conversation(record, directory, settings=self.settings,
                            make_session=self._make_session, fanout=self._fanout,
                            telemetry=self.telemetry)

    # -- start and stop ------------------------------------------------------------------

    async def start(self) -> None:
        records = await asyncio.to_thread(self._load_all)
        for directory, record in records:
            self._items[record.id] = self._conversation(record, directory)
        for conv in self._items.values():
            if conv.status == S.RUNNING:
                # No task survives a restart: say the run was cut; `run` continues it.
                await conv.append(
                    ConversationErrorEvent(
                        source="environment",
                        code="RunInterrupted",
                        detail="The server stopped during this run; POST .../run continues it.",
                    )
                )
                await conv.transition(S.ERROR)

    def _load_all(self) -> list[tuple[Path, StoredConversation]]:
        self.root.mkdir(parents=True, exist_ok=True)
        found = []
        for directory in self.root.iterdir():
            meta = directory / "meta.json"
            if not meta.is_file():
                continue
            try:
                found.append((directory, StoredConversation.model_validate(read_json(meta))))
            except (OSError, ValueError, ValidationError) as exc:
                logger.warning("skipping conversation in %s: %s", directory, exc)
        return found

    async def close(self, flush: Callable[[], Awaitable[None]] | None = None) -> None:
        """Stop every run (marking it paused, since `run` continues it), let `flush` deliver
        what the logs hold (the webhook), then close the logs."""
        # Top-level conversations first: stopping one interrupts the sub-agents it waits on,
        # instead of a sub-agent ending first and its parent taking one more step.
        convs = sorted(self._items.values(),
                       key=lambda c: c.record.parent_conversation_id is not None)
        for conv in convs:
            was_running = conv.running
            await conv.stop()
            if was_running and conv.status == S.RUNNING:
                await conv.transition(S.PAUSED)
        if flush is not None:
            await flush()
        for conv in convs:
            await conv.close()

    def refresh_secrets(self) -> None:
        """After the settings' secrets changed."""
        for conv in self._items.values():
            conv.refresh_secrets()

    # -- catalogue -----------------------------------------------------------------------

    def get(self, conversation_id: UUID) -> Conversation | None:
        return self._items.get(conversation_id)

    def __iter__(self) -> Iterator[Conversation]:
        return iter(list(self._items.values()))

    def __len__(self) -> int:
        return len(self._items)

    def children(self, conversation_id: UUID) -> list[Conversation]:
        """The conversations naming this one as their parent (its sub-agents)."""
        return [c for c in self._items.values()
                if c.record.parent_conversation_id == conversation_id]

    def matching(self, query: ConversationSearch) -> list[Conversation]:
        parent = query.parent_conversation_id
        return [c for c in self._items.values()
                if (query.status is None or c.status == query.status)
                and (parent is None or c.record.parent_conversation_id == parent)]

    def search(self, query: ConversationSearch) -> tuple[list[Conversation], str | None]:
        items = self.matching(query)
        field = "updated_at" if query.sort_order.startswith("UPDATED") else "created_at"
        items.sort(key=lambda c: (getattr(c.record, field), c.id),
                   reverse=query.sort_order.endswith("DESC"))
        start = 0
        if query.page_id is not None:
            start = next((i for i, c in enumerate(items) if c.record.id == query.page_id),
                         len(items))
        page = items[start : start + query.limit]
        rest = items[start + query.limit : start + query.limit + 1]
        return page, rest[0].id if rest else None

    async def create(self, request: CreateConversation) -> tuple[Conversation, bool]:
        """A new conversation (True), or the existing one with the same id (False).

        Bad input raises InvalidInput located inside the request (the API adds "body").
        """
        async with self._create_lock:
            conv_id = request.conversation_id or uuid.uuid4()
            existing = self._items.get(conv_id)
            if existing is not None:
                return existing, False
            agent = self._agent_for(request)
            secrets = secret_values(request.secrets)
            for name, problem in check_secrets(secrets):
                raise invalid(["secrets", name], problem, "value_error")
            if isinstance(agent, AgentSpec):  # an ACP agent brings its own tools
                check_tools(agent, {**self.settings().secrets, **secrets})
            parent = request.parent_conversation_id
            if parent is not None and (parent == conv_id or parent not in self._items):
                raise invalid(["parent_conversation_id"],
                              f"Parent conversation {parent} not found", input_=str(parent))
            workspace = request.workspace or Workspace(
                working_dir=str(self.default_working_dir)
            )
            await self._make_working_dir(Path(workspace.working_dir))
            moment = now()
            record = StoredConversation(
                id=conv_id,
                agent=agent,
                workspace=workspace,
                max_iterations=request.max_iterations,
                stuck_detection=request.stuck_detection,
                title=request.title,
                tags=request.tags,
                secrets=secrets,
                repository=request.repository,
                confirmation_policy=request.confirmation_policy,
                hook_config=request.hook_config,
                parent_conversation_id=parent,
                observability_span_name=request.observability_span_name,
                observability_tags=request.observability_tags,
                observability_metadata=request.observability_metadata,
                created_at=moment,
                updated_at=moment,
            )
            conv = self._conversation(record, self.root / conv_id.hex)
            conv.start_trace()
            await conv.save()
            self._items[conv_id] = conv
        try:
            await conv.open()
        except BaseException:  # leave nothing half made behind
            await self.delete(conv_id)
            raise
        if request.initial_message is not None:
            await conv.send_message(request.initial_message)
        return conv, True

    def _agent_for(self, request: CreateConversation) -> AgentSpec | ACPAgentSpec:
        """SPEC 2.6 rules 2 and 3: an agent given inline replaces the stored one, tools too."""
        if request.agent is not None:
            return request.agent
        stored = self.settings().agent
        if stored.llm is None:
            raise invalid(
                ["agent"],
                "Field required: no agent given and the settings hold no agent.llm "
                "(PATCH /api/settings or pass agent inline)",
                "missing",
            )
        return AgentSpec(llm=stored.llm, tools=stored.tools, condenser=stored.condenser,
                         mcp_config=stored.mcp_config)

    async def _make_working_dir(self, path: Path) -> None:
        try:
            await asyncio.to_thread(path.mkdir, parents=True, exist_ok=True)
        except OSError as exc:
            raise invalid(
                ["workspace", "working_dir"],
                f"cannot create the working directory: {exc.strerror}",
                input_=str(path),
            ) from None
        if not path.is_dir():
            raise invalid(["workspace", "working_dir"], "not a directory", input_=str(path))

    async def fork(self, source: Conversation, request: ForkRequest) -> Conversation:
        """A new conversation with the source's history (all of it, or the branch from the root
        to `from_event_id`), agent (its LLM key included), workspace and settings; it rests
        (idle) with HEAD where the source's was, or at `from_event_id`."""
        log = await source.log()
        await log.drain()
        if request.from_event_id is not None:
            if log.position(request.from_event_id) is None:
                raise NotFound(f"Event {request.from_event_id} (from_event_id) not found")
            positions: Sequence[int] = log.branch(request.from_event_id)
            head: str | None = request.from_event_id
        else:
            positions, head = range(len(log)), log.head
        lines = await asyncio.to_thread(log.read, positions)
        async with self._create_lock:
            fork_id = request.id or uuid.uuid4()
            if fork_id in self._items:
                raise Conflict(f"Conversation {fork_id} already exists")
            directory = self.root / fork_id.hex
            data = b"".join(line + b"\n" for line in lines)
            await asyncio.to_thread(_write_log, directory, data)
            moment = now()
            record = source.record.model_copy(deep=True, update={
                "id": fork_id, "execution_status": S.IDLE,
                "title": request.title if request.title is not None else source.record.title,
                "tags": request.tags if request.tags is not None else source.record.tags,
                "head_event_id": head, "head_set_at": len(lines),
                "forked_from_conversation_id": source.record.id,
                "forked_from_event_id": request.from_event_id,
                "created_at": moment, "updated_at": moment, "trace": None,
            })
            if request.reset_metrics:
                record.metrics = type(record.metrics)()
            conv = self._conversation(record, directory)
            conv.start_trace()  # a trace of its own, its span name, tags and metadata copied
            await conv.save()
            self._items[fork_id] = conv
        return conv

    async def delete(self, conversation_id: UUID) -> bool:
        """Stop its run, close its tools, remove its log and metadata (the workspace stays)."""
        conv = self._items.pop(conversation_id, None)
        if conv is None:
            return False
        await conv.close()  # its run ends first: a sub-agent it waits on is interrupted
        for child in self.children(conversation_id):  # and any child still running alone
            if child.running:
                with contextlib.suppress(Exception):
                    await child.interrupt()
        self._fanout.forget(conv.id)
        await asyncio.to_thread(shutil.rmtree, conv.directory, True)
        return True
