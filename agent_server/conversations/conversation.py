"""Conversation: one conversation's state and run.

A Conversation owns its record (saved as meta.json), its event log (opened the first time
something needs it), its execution status (moved only along `status.TRANSITIONS`), its
lifecycle and at most one run task; what a run does is its session's business, built for it
by the factory the composition root hands in. It is given its parts (`parts.ConversationParts`:
its files, secrets, presentation, trace, run control and session), which the catalogue builds
when it makes it. A change a client asks for goes one way: mutate the record, save it,
announce it (`_changing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import traceback
from collections.abc import AsyncIterator, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

from agent_server.agent.contract import AnsweringSession, Session, SteeredSession
from agent_server.agent.policies import ConfirmationPolicy
from agent_server.agent.skills import SkillList
from agent_server.agent.spec import LLMConfig
from agent_server.agent.usage import Metrics
from agent_server.conversations.files import create as create_files
from agent_server.conversations.parts import ConversationParts
from agent_server.log import EventLog
from agent_server.log_index import Query
from agent_server.record import ConversationInfo, SendMessage, StoredConversation
from agent_server.status import check_move
from agent_server.telemetry import logs as log_context
from agent_server.telemetry.tracing import ConversationTrace, failed
from core.masking import check_secrets
from events import (
    ConversationErrorEvent,
    ConversationStateUpdateEvent,
    Event,
    InterruptEvent,
    Message,
    MessageEvent,
    PauseEvent,
)
from events.status import ExecutionStatus
from web.errors import Conflict, NotFound, invalid

logger = logging.getLogger(__name__)


class Lifecycle(Enum):
    """OPEN takes requests; CLOSING (deletion or shutdown begun) starts no run but may still
    write (SessionEnd hooks); CLOSED writes nothing."""

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class Conversation:
    """One conversation: its record, its log, its status, its run task and its session."""

    def __init__(
        self, record: StoredConversation, directory: Path, parts: ConversationParts
    ) -> None:
        self.record = record
        self.directory = directory
        self._settings = parts.settings
        self.telemetry = parts.telemetry
        self._meta, self._log = parts.meta, parts.log
        #: Held while a run is being started or stopped.
        self._run_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.repository_clone = parts.repository_clone
        self.lifecycle = Lifecycle.OPEN
        #: Set once the conversation is closed (deleted or the server stopped): sockets and
        #: the webhook pusher wait on it instead of polling.
        self.closed = parts.closed
        #: What it keeps out of sight (kept current by refresh_secrets()): the secret values
        #: tools and hooks read, and the masker that hides them and the keys in every event.
        self._secrets = parts.secrets
        self.secret_values, self.masker = self._secrets.values, self._secrets.masker
        #: What clients are shown of it (its info, its state updates).
        self.shown = parts.shown
        #: Where this conversation's spans hang (its root span starts in `start_trace` when
        #: it is new; one loaded from disk continues the trace its record names).
        self.trace: ConversationTrace = parts.trace
        self.control = parts.control
        self.session: Session = parts.session
        #: The session again when its model, skills and hooks run here (our own agent);
        #: None for an agent that keeps its own (ACP).
        self._steered = self.session if isinstance(self.session, SteeredSession) else None

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

    async def opened_info(self) -> ConversationInfo:
        """The info with the tree's fields, which need the log open."""
        await self.log()
        return self.shown.info()

    # -- the record ------------------------------------------------------------------------

    async def log(self) -> EventLog:
        """Its event log, opened the first time something needs it (ConversationGone once it
        is closed)."""
        return await self._log.get()

    async def append(self, *events: Event) -> list[Event]:
        return await (await self.log()).append(*events)

    async def save(self) -> None:
        """Write the record (meta.json); nothing once it is closed, so a deleted conversation
        does not come back."""
        await self._meta.save()

    @contextlib.asynccontextmanager
    async def _changing(self, *fields: str) -> AsyncIterator[StoredConversation]:
        """A change a client asked for: the record is changed inside the block, then saved,
        then announced (`fields`: one update each; none: the full state)."""
        yield self.record
        await self.save()
        await self.shown.announce(*fields)

    def refresh_secrets(self) -> None:
        """The secrets in force and the keys never shown, as the settings and the record
        hold them now (after a change to either, or a switch of the model)."""
        self._secrets.refresh(self._settings(), self.record)

    async def add_secrets(self, values: dict[str, str]) -> None:
        for name, problem in check_secrets(values):
            raise invalid(["secrets", name], problem)
        async with self._changing() as record:
            record.secrets.update(values)
            self.refresh_secrets()

    async def update(
        self,
        *,
        title: str | None = None,
        clear_title: bool = False,
        tags: dict[str, str] | None = None,
    ) -> None:
        async with self._changing() as record:
            if title is not None or clear_title:
                record.title = title
            if tags is not None:
                record.tags = tags

    async def set_confirmation_policy(self, policy: ConfirmationPolicy) -> None:
        async with self._changing("confirmation_policy") as record:
            record.confirmation_policy = self.control.confirmation_policy = policy

    async def set_security_analyzer(self, analyzer: dict[str, Any] | None) -> None:
        async with self._changing("security_analyzer") as record:
            record.security_analyzer = analyzer

    async def transition(self, to: ExecutionStatus) -> None:
        """Move the execution status along the table (staying put is no move), save the record
        and record the move as an event; any other move raises InvalidTransition. It holds
        here at once; clients are shown it once the record and its event are stored, so what
        the run counted (its cost, its tokens) is on disk before anyone sees it end: a server
        killed right after a client saw FINISHED had lost the last turn's cost."""
        before = self.record.execution_status
        if to == before:
            return
        check_move(before, to)
        self.record.execution_status = to
        with self.shown.holding(before):
            await self.save()
            await self.append(ConversationStateUpdateEvent(key="execution_status", value=to.value))
        if to != ExecutionStatus.RUNNING:  # a run ended (or never will): what clients wait for
            self.shown.publish_state()

    # -- the agent's model -----------------------------------------------------------------

    async def switch_profile(self, name: str, reason: str = "") -> None:
        """The user's switch to a saved profile (from the next request on); KeyError when
        no profile has that name."""
        await self.append(await self.control.llm.switch_profile(name, reason, "user"))
        if self._steered is not None:
            await self._steered.follow_llm()

    async def switch_llm(self, config: LLMConfig, reason: str = "") -> None:
        await self.append(await self.control.llm.switch_llm(config, reason, "user"))
        if self._steered is not None:
            await self._steered.follow_llm()

    async def rotate_llm_key(self, key: str) -> None:
        await self.append(await self.control.llm.rotate_key(key))

    async def skills(self) -> SkillList:
        if self._steered is None:
            return SkillList(skills=[])  # an ACP agent keeps its own
        return await self._steered.skills()

    async def ask(self, question: str) -> str:
        """A side question, answered without adding to the conversation (LLMFailure, or an
        ACP agent's failure: 502)."""
        if not isinstance(self.session, AnsweringSession):
            raise Conflict("this conversation's agent answers no side questions")
        answer = await self.session.ask(self.masker.text(question))
        await self.save()  # the call's cost is counted
        return self.masker.text(answer)

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
            if self._steered is not None:
                self._steered.forget_view()
            if self.status == ExecutionStatus.WAITING_FOR_CONFIRMATION:  # off the branch now
                await self.transition(ExecutionStatus.IDLE)
            await self.save()
        await self.shown.announce("leaf_event_id", "head_is_empty", "last_user_message_id")

    # -- control -------------------------------------------------------------------------

    async def settle(self) -> None:
        """Wait for a run that has set its final status but whose task is still ending."""
        task = self._task
        if task is not None and not task.done() and self.status != ExecutionStatus.RUNNING:
            await asyncio.gather(asyncio.shield(task), return_exceptions=True)

    async def make(self) -> None:
        """A new conversation's files, made in one thread hop (`files.create`: its working
        directory, its directory, its log and its record; WorkingDirError), while its agent
        loads the skills its first event lists: `open` then waits on neither."""
        skills = asyncio.ensure_future(self._load_skills())
        try:
            await create_files(self._meta, self._log, self.working_dir)
        finally:
            await skills

    async def _load_skills(self) -> None:
        with contextlib.suppress(Exception):  # a failure shows in `open`, which tries again
            await self.skills()

    async def open(self) -> None:
        """The first events of a new conversation (the SystemPromptEvent)."""
        await self.session.open()

    async def send_message(self, message: SendMessage) -> MessageEvent:
        await self.settle()
        if self.status == ExecutionStatus.WAITING_FOR_CONFIRMATION and not self.running:
            # A new message never approves what waits: it rejects it.
            await self.session.reject_pending("superseded by a new user message")
            await self.transition(ExecutionStatus.IDLE)
        event = MessageEvent(
            source="user",
            llm_message=Message(role="user", content=message.contents()),
            sender=message.sender,
        )
        steered = self._steered
        if steered is not None:
            await steered.prepare_user_message(event)
        # A running agent takes no request while the message waits for its hooks' verdict.
        async with self.control.prompt_gate:
            await self.append(event)
            blocked = steered is not None and await steered.on_user_message(event)
        if message.run and not blocked:
            await self.run()
        return event

    async def respond(self, accept: bool, reason: str) -> None:
        """Run the actions waiting for confirmation (accept), or reject them and rest.

        Rejecting when nothing waits changes nothing (as the OpenHands agent server answers
        it); accepting then is a conflict, since it would not run anything."""
        await self.settle()
        if self.status != ExecutionStatus.WAITING_FOR_CONFIRMATION or self.running:
            if not accept:
                return
            raise Conflict(
                f"No action is waiting for confirmation (execution_status is {self.status.value})"
            )
        if accept:
            await self.run(approved=True)
        else:
            await self.session.reject_pending(reason)
            await self.transition(ExecutionStatus.IDLE)

    async def run(self, approved: bool = False) -> None:
        """Start the agent; one running keeps running (a pause asked meanwhile is withdrawn).
        A run while actions wait for confirmation runs them first: calling run again is how
        the OpenHands SDK accepts (as its agent server does); a new message rejects them."""
        async with self._run_lock:  # one run task at a time, even for calls made together
            if self.lifecycle is not Lifecycle.OPEN:
                return
            if self.running and self.status == ExecutionStatus.RUNNING:
                self.control.pause_requested = False
                return
            await self.settle()
            if self.running:
                return
            approved = approved or self.status == ExecutionStatus.WAITING_FOR_CONFIRMATION
            self.control.pause_requested = False
            await self.transition(ExecutionStatus.RUNNING)
            self._task = asyncio.create_task(self._run(approved), name=f"run {self.id}")

    def start_trace(self, forked_from: Conversation | None = None) -> None:
        """A new conversation's root span (and named span), its place kept in the record; a
        fork's links to its source's."""
        record = self.record
        self.trace = self.telemetry.tracing.conversation(
            self.id,
            span_name=record.observability_span_name,
            tags=record.observability_tags,
            metadata=record.observability_metadata,
            mask=self.masker.text,
            parent_conversation_id=(
                str(record.parent_conversation_id) if record.parent_conversation_id else None
            ),
            forked_from=(
                None if forked_from is None else (forked_from.id, forked_from.record.trace)
            ),
        )
        record.trace = self.trace.ref

    async def _run(self, approved: bool) -> None:
        log_context.set_conversation(self.id)  # this task's log records name the conversation
        try:
            with self.trace.run() as span:
                if await self.repository_clone.ensure(self):
                    status = await self.session.run(approved)
                    span.set_attribute("agent_server.run.status", status.value)
                    if status in (ExecutionStatus.ERROR, ExecutionStatus.STUCK):
                        failed(span, status.value)
                    await self.transition(status)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the session failed itself: say so, never leave it "running"
            # The traceback may quote a secret (an exception's message): masked like events.
            logger.error(
                "run of %s failed\n%s",
                self.id,
                self.masker.text("".join(traceback.format_exception(exc)))[-20_000:],
            )
            await self.fail(type(exc).__name__, str(exc))

    def prepare(self) -> None:
        """Clone the selected repository now, in the background, rather than at the first run
        (a creation that does not run at once: its `repository_status` tells when it is done).
        A failure is a ConversationErrorEvent; the status stays idle and a run tries again
        (see cloning)."""
        self.repository_clone.start(self)

    def git_author(self) -> Mapping[str, str]:
        return self._settings().git_author()

    async def fail(self, code: str, detail: str) -> None:
        """End the run in ERROR with a ConversationErrorEvent (masked, then cut)."""
        try:
            await self.append(
                ConversationErrorEvent(
                    source="environment", code=code, detail=self.masker.text(detail)[:2000]
                )
            )
        except Exception:
            logger.exception("recording the failure of %s failed", self.id)
        try:
            await self.transition(ExecutionStatus.ERROR)
        except Exception:  # the log cannot take it: the record says it at least
            self.record.execution_status = ExecutionStatus.ERROR
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
            if self.status == ExecutionStatus.RUNNING:
                await self.transition(ExecutionStatus.PAUSED)

    async def recover_totals(self) -> None:
        """A run a stop cut short (the server killed during it): the record is saved at
        status moves, so what the run counted since its move to RUNNING (its cost, its
        tokens) is not in it; the run's last `stats` update in the log has those totals, and
        is taken when it counts more responses."""
        totals = _run_totals(await self.log())
        metrics = self.record.metrics
        if totals is not None and totals.response_count > metrics.response_count:
            for name in type(metrics).model_fields:  # in place: the agent counts on this one
                setattr(metrics, name, getattr(totals, name))

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

    async def close(self) -> None:
        self.lifecycle = Lifecycle.CLOSING  # no new run from here on; SessionEnd may still write
        await self.repository_clone.close()
        async with self._run_lock:
            await self.stop()
        try:
            await self.session.close()
        except Exception:
            logger.exception("closing the agent of %s failed", self.id)
        self.lifecycle = Lifecycle.CLOSED
        self.closed.set()
        self.trace.end()  # its root span ends (and is exported) with its life in this process
        await self._log.close()


#: State updates read back at most, looking for a cut run's last `stats` (a run makes one per
#: model response and two status moves).
TOTALS_LOOKBACK = 1000


def _run_totals(log: EventLog) -> Metrics | None:
    """The totals of the last `stats` update since the log's last move to RUNNING (None when
    the run made none): the state updates read from the end, newest first."""
    query, page = Query(kind="ConversationStateUpdateEvent", descending=True), None
    for _ in range(TOTALS_LOOKBACK // 100):
        lines, page = log.search(query, 100, page)
        for line in lines:
            try:
                update = json.loads(line)
                key, value = update.get("key"), update.get("value")
                if key == "execution_status" and value == ExecutionStatus.RUNNING.value:
                    return None
                if key == "stats":
                    return Metrics.model_validate(next(iter(value["usage_to_metrics"].values())))
            except (ValueError, TypeError, KeyError, AttributeError, StopIteration):
                continue  # a line unreadable as such counts as none
        if page is None:
            break
    return None
