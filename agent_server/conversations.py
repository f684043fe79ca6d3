"""ConversationService (the catalogue) and Conversation (one conversation's state and run).

Start-up reads only each conversation's meta.json; a conversation's event log is opened the
first time something needs it. A Conversation owns at most one run task at a time; what a run
does is the agent's business (agent_server.agent), handed in from outside.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol
from uuid import UUID

from pydantic import ValidationError

from agent_server.errors import invalid
from agent_server.events import (
    ConversationErrorEvent,
    ConversationStateUpdateEvent,
    Event,
    InterruptEvent,
    Message,
    MessageEvent,
    PauseEvent,
)
from agent_server.log import EventLog
from agent_server.secrets import Masker, check_secrets
from agent_server.models import (
    AgentSpec,
    ConversationSearch,
    CreateConversation,
    ExecutionStatus,
    SendMessage,
    Settings,
    StoredConversation,
    Workspace,
    secret_values,
)
from agent_server.store import read_json, write_json

logger = logging.getLogger(__name__)

class ConversationGone(Exception):
    """The conversation was deleted (or the server is stopping) while a request used it."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"Conversation {conversation_id} was deleted")


class Agent(Protocol):
    """What the conversations need of the agent (agent_server.agent implements it)."""

    def check_tools(self, agent: AgentSpec, secrets: dict[str, str]) -> None:
        """Refuse unknown tool names and unfillable placeholders (raises RequestInvalid)."""

    def prepare_user_message(self, conv: Conversation, event: MessageEvent) -> None:
        """Fill in what the agent adds to a user message before it is stored (skills)."""

    async def open_conversation(self, conv: Conversation) -> None:
        """Write the first events of a new conversation (the SystemPromptEvent)."""

    async def run(self, conv: Conversation) -> None:
        """The loop; it owns the status from RUNNING on."""

    async def on_user_message(self, conv: Conversation, event: MessageEvent) -> bool:
        """UserPromptSubmit hooks; True when they blocked the message."""

    async def reject_pending(self, conv: Conversation, reason: str) -> None:
        """Reject the actions waiting for confirmation."""

    async def close(self, conv: Conversation) -> None:
        """SessionEnd hooks, then release the conversation's tools."""


def now() -> datetime:
    return datetime.now(timezone.utc)


class Conversation:
    """One conversation: its record, its log, its run task."""

    def __init__(self, record: StoredConversation, directory: Path, service: ConversationService):
        self.record = record
        self.directory = directory
        self.service = service
        self._log: EventLog | None = None
        self._log_lock = asyncio.Lock()
        self._save_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        #: Set by pause(); the loop stops between steps when it sees it.
        self.pause_requested = False
        #: Set by an accepted confirmation: the next run first runs the waiting actions.
        self.approved = False
        #: Held while a user message waits for its UserPromptSubmit hooks (see send_message).
        self.prompt_gate = asyncio.Lock()
        #: Held while a run is being started or stopped.
        self._run_lock = asyncio.Lock()
        #: Set when deletion or shutdown begins (no new run), then once it is done (no write).
        self.closing = False
        self.closed = False
        #: Per-conversation objects the runner keeps between runs (tools, shells).
        self.runtime: Any = None
        #: The workspace's skills, read on first need (agent_server.agent.skills).
        self.skill_book: Any = None
        #: The secret values in force (settings', then the conversation's own); one live dict
        #: that tools read, kept current by refresh_secrets().
        self.secret_values: dict[str, str] = {}
        self.masker = Masker(self.secret_values)  # follows the live dict
        self.refresh_secrets()

    def refresh_secrets(self) -> None:
        merged = {**self.service.settings().secrets, **self.record.secrets}
        self.secret_values.clear()
        self.secret_values.update(merged)

    def _redact(self, data: Any) -> Any:
        return self.masker.data(data) if self.masker else data

    async def add_secrets(self, values: dict[str, str]) -> None:
        self.record.secrets.update(values)
        self.refresh_secrets()
        await self.save()

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

    # -- persistence ---------------------------------------------------------------------

    async def log(self) -> EventLog:
        if self.closed:
            raise ConversationGone(self.id)
        if self._log is None:
            async with self._log_lock:
                if self._log is None:
                    log = await asyncio.to_thread(EventLog.open, self.directory / "events.jsonl")
                    log.redactor = self._redact
                    self._log = log
                    self.service.on_log_opened(self, self._log)
        return self._log

    async def append(self, *events: Event) -> list[Event]:
        return await (await self.log()).append(*events)

    def publish_transient(self, event: Event) -> None:
        """Live-only events (streaming deltas): never stored, never pushed to the webhook."""
        for listener in self.service.transient_listeners:
            listener(self, event)

    async def save(self) -> None:
        if self.closed:  # a deleted conversation must not come back
            return
        async with self._save_lock:  # one writer at a time, each writing the latest record
            self.record.updated_at = now()
            data = self.record.model_dump(mode="json")
            await asyncio.to_thread(write_json, self.directory / "meta.json", data)

    async def set_status(self, status: ExecutionStatus) -> None:
        if status == self.record.execution_status:
            return
        self.record.execution_status = status
        await self.append(ConversationStateUpdateEvent(key="execution_status", value=status.value))
        await self.save()

    # -- control -------------------------------------------------------------------------

    async def settle(self) -> None:
        """Wait for a run that has set its final status but whose task is still ending."""
        task = self._task
        if task is not None and not task.done() and self.status != ExecutionStatus.RUNNING:
            await asyncio.gather(asyncio.shield(task), return_exceptions=True)

    async def send_message(self, message: SendMessage) -> MessageEvent:
        await self.settle()
        if self.status == ExecutionStatus.WAITING_FOR_CONFIRMATION and not self.running:
            # A new message never approves what waits: it rejects it.
            await self.service.agent.reject_pending(self, "superseded by a new user message")
            await self.set_status(ExecutionStatus.IDLE)
        event = MessageEvent(
            source="user",
            llm_message=Message(role="user", content=message.contents()),
            sender=message.sender,
        )
        self.service.agent.prepare_user_message(self, event)
        # A running agent takes no request while the message waits for its hooks' verdict.
        async with self.prompt_gate:
            await self.append(event)
            blocked = await self.service.agent.on_user_message(self, event)
        if message.run and not blocked:
            await self.run()
        return event

    async def run(self, approved: bool = False) -> None:
        """Start the agent unless it is already running (then nothing changes).

        Actions waiting for confirmation run only with `approved` (an explicit accept); a
        plain run while waiting changes nothing.
        """
        async with self._run_lock:  # one run task at a time, even for calls made together
            if self.closing or (self.running and self.status == ExecutionStatus.RUNNING):
                return
            await self.settle()
            if self.running:
                return
            if self.status == ExecutionStatus.WAITING_FOR_CONFIRMATION and not approved:
                return
            self.approved = approved
            self.pause_requested = False
            await self.set_status(ExecutionStatus.RUNNING)
            self._task = asyncio.create_task(self._run(), name=f"run {self.id}")

    async def _run(self) -> None:
        try:
            await self.service.agent.run(self)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the runner failed itself: say so, never leave it "running"
            logger.exception("run of %s failed", self.id)
            try:
                await self.append(ConversationErrorEvent(
                    source="environment", code=type(exc).__name__,
                    detail=self.masker.text(str(exc))[:2000],
                ))
            except Exception:
                logger.exception("recording the failure of %s failed", self.id)
            finally:
                try:
                    await self.set_status(ExecutionStatus.ERROR)
                except Exception:  # the log cannot take it: the record says it at least
                    self.record.execution_status = ExecutionStatus.ERROR
                    with contextlib.suppress(Exception):
                        await self.save()

    async def pause(self) -> None:
        """Takes effect between steps (SPEC 3.3)."""
        await self.append(PauseEvent())
        if self.running:
            self.pause_requested = True

    async def interrupt(self) -> None:
        """Cancels the in-flight LLM call or tool at once (SPEC 3.3)."""
        await self.append(InterruptEvent())
        async with self._run_lock:  # a run being started now is cancelled, not missed
            await self.stop()
            if self.status == ExecutionStatus.RUNNING:
                await self.set_status(ExecutionStatus.PAUSED)

    async def stop(self) -> None:
        """Cancel the run task, if any, and wait for its clean-up."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def close(self) -> None:
        self.closing = True  # no new run from here on; SessionEnd hooks may still write
        async with self._run_lock:
            await self.stop()
        try:
            await self.service.agent.close(self)
        except Exception:
            logger.exception("closing the agent of %s failed", self.id)
        self.closed = True
        if self._log is not None:
            await self._log.drain()
            self._log.close()
            self._log = None


class ConversationService:
    """The catalogue of conversations under state_dir/conversations."""

    def __init__(
        self,
        state_dir: Path,
        default_working_dir: Path,
        agent: Agent,
        settings: Callable[[], Settings],
        terminal_idle_timeout: float = 600.0,
    ) -> None:
        self.root = state_dir / "conversations"
        self.default_working_dir = default_working_dir
        self.agent = agent
        self.terminal_idle_timeout = terminal_idle_timeout
        #: The one Chromium of this server, shared by the conversations' browser tools;
        #: made by browser_manager() when a conversation first has them (Chromium itself
        #: starts on the first browser call).
        self.browser: Any = None
        self.settings = settings
        self._items: dict[UUID, Conversation] = {}
        self._create_lock = asyncio.Lock()
        self._log_listeners: list[Callable[[Conversation, EventLog], None]] = []
        #: Called with each transient event (delivery to websockets hooks in here).
        self.transient_listeners: list[Callable[[Conversation, Event], None]] = []
        #: Called with each conversation deleted (delivery forgets its pusher).
        self.delete_listeners: list[Callable[[Conversation], None]] = []

    # -- start and stop ------------------------------------------------------------------

    async def start(self) -> None:
        records = await asyncio.to_thread(self._load_all)
        for directory, record in records:
            self._items[record.id] = Conversation(record, directory, self)
        for conv in self._items.values():
            if conv.status == ExecutionStatus.RUNNING:
                # No task survives a restart: say the run was cut; `run` continues it.
                await conv.append(
                    ConversationErrorEvent(
                        source="environment",
                        code="RunInterrupted",
                        detail="The server stopped during this run; POST .../run continues it.",
                    )
                )
                await conv.set_status(ExecutionStatus.ERROR)

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

    async def close(self, graceful_status: ExecutionStatus = ExecutionStatus.PAUSED,
                    flush: Callable[[], Awaitable[None]] | None = None) -> None:
        """Stop every run (marking it paused, since `run` continues it), let `flush` deliver
        what the logs hold (the webhook), then close the logs."""
        convs = list(self._items.values())
        for conv in convs:
            was_running = conv.running
            await conv.stop()
            if was_running and conv.status == ExecutionStatus.RUNNING:
                await conv.set_status(graceful_status)
        if flush is not None:
            await flush()
        for conv in convs:
            await conv.close()

    def browser_manager(self) -> Any:
        if self.browser is None:
            from tools.browser.manager import BrowserManager  # Playwright loads only now

            self.browser = BrowserManager()
        return self.browser

    def refresh_secrets(self) -> None:
        """After the settings' secrets changed."""
        for conv in self._items.values():
            conv.refresh_secrets()

    def on_log_opened(self, conv: Conversation, log: EventLog) -> None:
        for listener in self._log_listeners:
            listener(conv, log)

    def add_log_listener(self, listener: Callable[[Conversation, EventLog], None]) -> None:
        """Called with each conversation's log as it is opened (delivery hooks in here)."""
        self._log_listeners.append(listener)

    # -- catalogue -----------------------------------------------------------------------

    def get(self, conversation_id: UUID) -> Conversation | None:
        return self._items.get(conversation_id)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(list(self._items.values()))

    def __len__(self) -> int:
        return len(self._items)

    def search(self, query: ConversationSearch) -> tuple[list[Conversation], str | None]:
        items = [
            c for c in self._items.values() if query.status is None or c.status == query.status
        ]
        field = "updated_at" if query.sort_order.startswith("UPDATED") else "created_at"
        items.sort(key=lambda c: (getattr(c.record, field), c.id), reverse=query.sort_order.endswith("DESC"))
        start = 0
        if query.page_id is not None:
            start = next((i for i, c in enumerate(items) if c.record.id == query.page_id),
                         len(items))
        page = items[start : start + query.limit]
        rest = items[start + query.limit : start + query.limit + 1]
        return page, rest[0].id if rest else None

    async def create(self, request: CreateConversation) -> tuple[Conversation, bool]:
        """A new conversation (True), or the existing one with the same id (False)."""
        async with self._create_lock:
            conv_id = request.conversation_id or uuid.uuid4()
            existing = self._items.get(conv_id)
            if existing is not None:
                return existing, False
            agent = self._agent_for(request)
            secrets = secret_values(request.secrets)
            for name, problem in check_secrets(secrets):
                raise invalid(["body", "secrets", name], problem, "value_error")
            self.agent.check_tools(agent, {**self.settings().secrets, **secrets})
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
                created_at=moment,
                updated_at=moment,
            )
            conv = Conversation(record, self.root / conv_id.hex, self)
            await conv.save()
            self._items[conv_id] = conv
        try:
            await self.agent.open_conversation(conv)
        except BaseException:  # leave nothing half made behind
            await self.delete(conv_id)
            raise
        if request.initial_message is not None:
            await conv.send_message(request.initial_message)
        return conv, True

    def _agent_for(self, request: CreateConversation) -> AgentSpec:
        """SPEC 2.6 rules 2 and 3: an agent given inline replaces the stored one, tools too."""
        if request.agent is not None:
            return request.agent
        stored = self.settings().agent
        if stored.llm is None:
            raise invalid(
                ["body", "agent"],
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
                ["body", "workspace", "working_dir"],
                f"cannot create the working directory: {exc.strerror}",
                input_=str(path),
            ) from None
        if not path.is_dir():
            raise invalid(
                ["body", "workspace", "working_dir"], "not a directory", input_=str(path)
            )

    async def delete(self, conversation_id: UUID) -> bool:
        """Stop its run, close its tools, remove its log and metadata (the workspace stays)."""
        conv = self._items.pop(conversation_id, None)
        if conv is None:
            return False
        await conv.close()
        for listener in self.delete_listeners:
            listener(conv)
        await asyncio.to_thread(shutil.rmtree, conv.directory, True)
        return True
