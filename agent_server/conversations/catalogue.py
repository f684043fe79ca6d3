"""ConversationService: the catalogue of conversations under state_dir/conversations.

Start-up reads only each conversation's meta.json; a conversation's event log is opened the
first time something needs it. The catalogue makes conversations (each given its parts,
built by `parts.build_parts`), finds, forks and deletes them; everything else is the
Conversation's own business.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

from pydantic import ValidationError

from agent_server.agent.contract import SessionFactory
from agent_server.agent.spec import ACPAgentSpec, AgentSpec
from agent_server.agent.toolbox import check_tools
from agent_server.conversations.conversation import Conversation
from agent_server.conversations.fanout import Fanout
from agent_server.conversations.files import WorkingDirError, make_working_dir
from agent_server.conversations.parts import build_parts
from agent_server.log import LOG_FILE_NAME, EventLog
from agent_server.record import (
    ConversationSearch,
    CreateConversation,
    ForkRequest,
    StoredConversation,
    Workspace,
    secret_values,
)
from agent_server.settings import Settings
from agent_server.telemetry import Telemetry
from core.files import read_json
from core.masking import check_secrets
from events import ConversationErrorEvent
from events.status import ExecutionStatus
from web.errors import SECRET_FIELDS, Conflict, InvalidInput, NotFound, from_pydantic, invalid

logger = logging.getLogger(__name__)


class ConversationService:
    """The catalogue of conversations under state_dir/conversations.

    `sessions` builds the factory of its conversations' agent sessions; it is given the
    catalogue itself, whose conversations are the sub-agents those sessions may start.
    `hidden` (the server's own keys) is masked in every conversation's events.
    """

    def __init__(
        self,
        state_dir: Path,
        default_working_dir: Path,
        *,
        settings: Callable[[], Settings],
        sessions: Callable[[ConversationService], SessionFactory],
        fanout: Fanout,
        telemetry: Telemetry | None = None,
        hidden: Mapping[str, str] | None = None,
    ) -> None:
        self.root = state_dir / "conversations"
        self.hidden: Mapping[str, str] = dict(hidden or {})
        self.telemetry = telemetry or Telemetry.build()
        self.default_working_dir = default_working_dir
        self.settings = settings
        self._fanout = fanout
        self._items: dict[UUID, Conversation] = {}
        self._create_lock = asyncio.Lock()
        self._make_session = sessions(self)

    def _conversation(self, record: StoredConversation, directory: Path) -> Conversation:
        """The factory of this catalogue's conversations (new, forked, or loaded): each is
        given its parts, built here from its record and directory."""
        parts = build_parts(
            record,
            directory,
            settings=self.settings,
            make_session=self._make_session,
            fanout=self._fanout,
            telemetry=self.telemetry,
            hidden=self.hidden,
        )
        return Conversation(record, directory, parts)

    # -- start and stop ------------------------------------------------------------------

    async def start(self) -> None:
        records = await asyncio.to_thread(self._load_all)
        for directory, record in records:
            self._items[record.id] = self._conversation(record, directory)
        for conv in self._items.values():
            if conv.status == ExecutionStatus.RUNNING:
                # No task survives a restart: say the run was cut; `run` continues it. What
                # it counted since it began is taken back from its log first, so the record
                # saved by the move has it.
                await conv.recover_totals()
                await conv.append(
                    ConversationErrorEvent(
                        source="environment",
                        code="RunInterrupted",
                        detail="The server stopped during this run; POST .../run continues it.",
                    )
                )
                await conv.transition(ExecutionStatus.ERROR)

    def _load_all(self) -> list[tuple[Path, StoredConversation]]:
        self.root.mkdir(parents=True, exist_ok=True)
        found = []
        for directory in self.root.iterdir():
            meta = directory / "meta.json"
            if not meta.is_file():
                continue
            try:
                found.append((directory, StoredConversation.model_validate(read_json(meta))))
            except ValidationError as exc:  # its fields, never their values (secrets)
                logger.warning(
                    "skipping conversation in %s: %s",
                    directory,
                    exc.errors(include_input=False, include_url=False),
                )
            except (OSError, ValueError) as exc:
                logger.warning("skipping conversation in %s: %s", directory, exc)
        return found

    async def close(self, flush: Callable[[], Awaitable[None]] | None = None) -> None:
        """Stop every run (marking it paused, since `run` continues it), let `flush` deliver
        what the logs hold (the webhook), then close the logs."""
        # Top-level conversations first: stopping one interrupts the sub-agents it waits on,
        # instead of a sub-agent ending first and its parent taking one more step.
        convs = sorted(
            self._items.values(), key=lambda c: c.record.parent_conversation_id is not None
        )
        for conv in convs:
            was_running = conv.running
            await conv.stop()
            if was_running and conv.status == ExecutionStatus.RUNNING:
                await conv.transition(ExecutionStatus.PAUSED)
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
        return [
            c for c in self._items.values() if c.record.parent_conversation_id == conversation_id
        ]

    def matching(self, query: ConversationSearch) -> list[Conversation]:
        parent = query.parent_conversation_id
        return [
            c
            for c in self._items.values()
            if (query.status is None or c.shown.status == query.status)
            and (parent is None or c.record.parent_conversation_id == parent)
        ]

    def search(self, query: ConversationSearch) -> tuple[list[Conversation], str | None]:
        items = self.matching(query)
        field = "updated_at" if query.sort_order.startswith("UPDATED") else "created_at"
        items.sort(
            key=lambda c: (getattr(c.record, field), c.id),
            reverse=query.sort_order.endswith("DESC"),
        )
        start = 0
        if query.page_id is not None:
            start = next(
                (i for i, c in enumerate(items) if c.record.id == query.page_id), len(items)
            )
        page = items[start : start + query.limit]
        rest = items[start + query.limit : start + query.limit + 1]
        return page, rest[0].id if rest else None

    async def create(self, request: CreateConversation) -> tuple[Conversation, bool]:
        """A new conversation (True), or the existing one with the same id (False).

        Bad input raises InvalidInput located inside the request (the API adds "body").
        """
        given = await secret_values(request.secrets)  # lookups fetched before the lock
        async with self._create_lock:
            conv_id = request.conversation_id or uuid.uuid4()
            existing = self._items.get(conv_id)
            if existing is not None:
                return existing, False
            agent = self._agent_for(request)
            secrets = given
            for name, problem in check_secrets(secrets):
                raise invalid(["secrets", name], problem, "value_error")
            if isinstance(agent, AgentSpec):  # an ACP agent brings its own tools
                check_tools(agent, {**self.settings().secrets, **secrets})
            parent = request.parent_conversation_id
            if parent is not None and (parent == conv_id or parent not in self._items):
                raise invalid(
                    ["parent_conversation_id"],
                    f"Parent conversation {parent} not found",
                    input_=str(parent),
                )
            workspace = request.workspace or Workspace(working_dir=str(self.default_working_dir))
            working_dir = Path(workspace.working_dir)
            if not working_dir.is_dir():  # refused before a trace starts for it (a hop)
                await self._make_working_dir(working_dir)
            record = StoredConversation.new(
                conv_id,
                request,
                agent=agent,
                workspace=workspace,
                secrets=secrets,
                at=datetime.now(UTC),
            )
            conv = self._conversation(record, self.root / conv_id.hex)
            conv.start_trace()
            try:  # its files, its record last: durable before it is listed
                await conv.make()
            except WorkingDirError as exc:  # removed since it was looked at
                raise self._working_dir_error(working_dir, exc) from None
            self._items[conv_id] = conv
        try:
            await conv.open()
        except BaseException:  # leave nothing half made behind
            await self.delete(conv_id)
            raise
        if request.initial_message is not None:
            await conv.send_message(request.initial_message)
        if request.initial_message is None or not request.initial_message.run:
            conv.prepare()  # a run clones first itself
        return conv, True

    def _agent_for(self, request: CreateConversation) -> AgentSpec | ACPAgentSpec:
        """SPEC 2.6 rules 2 and 3: an agent given inline replaces the stored one, tools too;
        an ACP agent without its command is the one saved in the settings under its name."""
        if isinstance(request.agent, ACPAgentSpec) and not request.agent.acp_command:
            return self._saved_acp_agent(request.agent)
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
        return AgentSpec(
            llm=stored.llm,
            tools=stored.tools,
            condenser=stored.condenser,
            mcp_config=stored.mcp_config,
        )

    def _saved_acp_agent(self, agent: ACPAgentSpec) -> ACPAgentSpec:
        name = agent.acp_server
        if name is None:
            raise invalid(
                ["agent", "acp_command"],
                "Field required: give acp_command, or "
                "acp_server naming an ACP agent saved in the settings (acp_agents)",
                "missing",
            )
        saved = self.settings().acp_agents.get(name)
        if saved is None:
            raise invalid(
                ["agent", "acp_server"],
                f"No ACP agent named {name!r} in the "
                "settings (acp_agents): save one with PATCH /api/settings, or give "
                "acp_command",
                input_=name,
            )
        try:
            return saved.applied_to(agent)
        except ValidationError as exc:  # (over a bound once merged: never an env value shown)
            raise from_pydantic(exc, "agent", secret={*SECRET_FIELDS, "acp_env"}) from None

    async def _make_working_dir(self, path: Path) -> None:
        try:
            await asyncio.to_thread(make_working_dir, path)
        except WorkingDirError as exc:
            raise self._working_dir_error(path, exc) from None

    @staticmethod
    def _working_dir_error(path: Path, exc: WorkingDirError) -> InvalidInput:
        return invalid(["workspace", "working_dir"], str(exc), input_=str(path))

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
            await asyncio.to_thread(EventLog.write_new, directory / LOG_FILE_NAME, lines)
            record = source.record.forked(
                fork_id, request, head=head, head_set_at=len(lines), at=datetime.now(UTC)
            )
            conv = self._conversation(record, directory)
            # A trace of its own (span name, tags and metadata copied), linked to the source's.
            conv.start_trace(forked_from=source)
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
