"""App conversations: the record of SPEC 2.1 and what can be done with one.

Execution status is asked of the agent server while the sandbox is RUNNING, otherwise the last
value the webhook brought is shown. Reads of the transcript come from this control plane's own
event store, so they stay after the sandbox is gone; workspace reads and messages need the
sandbox (refused with 409 for ERROR and 410 for MISSING; a PAUSED one is resumed first).
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import zipfile
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from control_plane.agent_client import AgentClient, AgentError, Raw, Target
from control_plane.models import (
    ConversationFilters,
    ConversationRow,
    EventFilters,
    SandboxReason,
    SandboxStatus,
    ensure_usable,
)
from control_plane.sandboxes.service import SandboxService
from control_plane.store import Database, conversations, events
from events import MessageEvent, parse_event
from events.content import text_of
from events.status import ExecutionStatus
from events.usage import TokenUsage
from web.errors import Conflict, NotFound, UpstreamError

#: The agent-server routes a client may read through the control plane (SPEC 4.2).
#: Events the trajectory zip holds one file each of, beside events.jsonl (the OpenHands app
#: server refuses to export more than this many at all; ours has them all in events.jsonl).
EXPORT_EVENT_FILES = 10_000
INSPECTION = {
    "file": "/file",
    "files": "/files",
    "git/changes": "/git/changes",
    "git/diff": "/git/diff",
    "skills": "/skills",
    "hooks": "/hooks",
}

#: The same over the whole workspace of the sandbox (every conversation's directory in it).
SANDBOX_INSPECTION = {"file": "/api/file/download", "files": "/api/files"}

#: The agent-server routes that steer a conversation (the console's buttons).
CONTROLS = {
    "pause": "/pause",
    "interrupt": "/interrupt",
    "confirmation-policy": "/confirmation_policy",
    "respond-to-confirmation": "/events/respond_to_confirmation",
    "switch-llm": "/switch_llm",
    "run": "/run",
}


class Metrics(BaseModel):
    """Usage totals in the shape of the OpenHands SDK's `MetricsSnapshot` (what the app server
    and the web frontend read), from the agent server's stats events."""

    model_name: str = "default"
    accumulated_cost: float = 0.0
    max_budget_per_task: float | None = None
    accumulated_token_usage: TokenUsage | None = None

    @classmethod
    def stored(cls, data: dict[str, Any] | None) -> Metrics:
        """As stored; the flat totals of records written before issue 26 are read too."""
        if not data:
            return cls()
        if "accumulated_token_usage" in data or "model_name" in data:
            return cls.model_validate(data)
        usage = TokenUsage.model_validate(
            {k: v for k, v in data.items() if k in TokenUsage.model_fields}
        )
        return cls(
            accumulated_cost=float(data.get("accumulated_cost") or 0), accumulated_token_usage=usage
        )


class AppConversation(BaseModel):
    """The app-conversation record (SPEC 2.1) with the OpenHands app server's field names, where
    the SPEC is silent, and ours beside them."""

    id: str
    app_conversation_id: str
    """The same as `id` (SPEC 2.1's name for it)."""
    created_by_user_id: str
    sandbox_id: str
    sandbox_status: SandboxStatus
    execution_status: ExecutionStatus | None
    """Lowercase, as the app server sends it (SPEC 3.2's values)."""
    selected_repository: str | None
    selected_branch: str | None
    git_provider: str | None = None
    title: str | None
    trigger: str | None = None
    """What started it: `openhands_api` for this API, null for conversations made straight on
    the sandbox's agent server; or what a client set."""
    pr_number: list[int] = Field(default_factory=list)
    llm_model: str | None = None
    agent_kind: str = "openhands"
    public: bool | None = None
    parent_conversation_id: str | None = None
    sub_conversation_ids: list[str] = Field(default_factory=list)
    tags: dict[str, str]
    metrics: Metrics
    observability_span_name: str | None = None
    observability_tags: list[str] = Field(default_factory=list)
    observability_metadata: dict[str, Any] = Field(default_factory=dict)
    working_dir: str | None = None
    """Its working directory inside the sandbox: the file paths in its events are under it."""
    conversation_url: str | None
    """The agent server's own address of this conversation (only while RUNNING; never to a
    browser)."""
    session_api_key: str | None
    """The key for `conversation_url` (only while RUNNING; never to a browser)."""
    created_at: datetime
    updated_at: datetime
    last_activity_at: datetime


#: The most a conversation's reported stats may say (they are its sandbox's word, which the
#: sandbox's code can forge): a cost in USD, and a count of tokens.
MAX_COST = 1e6
MAX_TOKENS = 10**12


def _figure(value: Any, most: float) -> float:
    """A reported figure held to [0, `most`]: not a number (or NaN) is 0, infinity the most."""
    try:
        number = float(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return 0.0 if math.isnan(number) else min(max(number, 0.0), most)


def metrics_from_stats(value: Any) -> dict[str, Any] | None:
    """A `stats` ConversationStateUpdateEvent value -> Metrics (summed over usage ids), each
    figure and each sum held within MAX_COST and MAX_TOKENS."""
    per_usage = value.get("usage_to_metrics") if isinstance(value, dict) else None
    if not isinstance(per_usage, dict):
        return None
    cost = 0.0
    usage = TokenUsage()
    models: set[str] = set()
    for item in per_usage.values():
        if not isinstance(item, dict):
            continue
        cost = min(cost + _figure(item.get("accumulated_cost"), MAX_COST), MAX_COST)
        if isinstance(item.get("model_name"), str):
            models.add(item["model_name"][:200])
        tokens = item.get("accumulated_token_usage")
        tokens = tokens if isinstance(tokens, dict) else {}
        for name in (
            "prompt_tokens",
            "completion_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
            "per_turn_token",
        ):
            total = getattr(usage, name) + int(_figure(tokens.get(name), MAX_TOKENS))
            setattr(usage, name, min(total, MAX_TOKENS))
        usage.context_window = max(
            usage.context_window, int(_figure(tokens.get("context_window"), MAX_TOKENS))
        )
    model = models.pop() if len(models) == 1 else "default"
    usage.model = "" if model == "default" else model
    return Metrics(
        model_name=model, accumulated_cost=cost, accumulated_token_usage=usage
    ).model_dump()


class AppConversationService:
    def __init__(self, db: Database, sandboxes_: SandboxService, agents: AgentClient) -> None:
        self.db = db
        self.sandboxes = sandboxes_
        self.agents = agents

    async def first_user_text(self, conversation_id: str) -> str:
        """The text of the first user message stored ("" before there is one)."""
        bodies, _ = await events.search(
            self.db,
            conversation_id,
            EventFilters(kind="MessageEvent", source="user"),
            descending=False,
            limit=1,
            page=None,
        )
        try:
            event = parse_event(bodies[0]) if bodies else None
        except ValidationError:  # a row stored before events were checked on the way in
            return ""
        return text_of(event.llm_message.content) if isinstance(event, MessageEvent) else ""

    async def touch(self, row: ConversationRow) -> None:
        """A read through the application interface (events, the trajectory, the workspace) is
        activity: it moves the RUNNING sandbox's idle pause later (SPEC 3.1)."""
        async with self.db.begin() as conn:
            await self.sandboxes.rows.touch(conn, row.sandbox_id, only_running=True)

    async def owned(self, conversation_id: str, user_id: str) -> ConversationRow:
        row = await conversations.get(self.db, conversation_id, user_id)
        if row is None or not row.started:
            raise NotFound(f"conversation {conversation_id} not found")
        return row

    async def owned_many(self, ids: list[str], user_id: str) -> list[AppConversation]:
        """The records of the user's started conversations among `ids` (others are left out)."""
        return await self.records(
            list((await conversations.get_many(self.db, ids, user_id)).values())
        )

    async def search(
        self, user_id: str, filters: ConversationFilters, *, order: str, limit: int, offset: int
    ) -> tuple[list[AppConversation], bool]:
        """A page of the user's conversations, and whether more follow it."""
        found = await conversations.search(
            self.db, user_id, filters, order=order, limit=limit + 1, offset=offset
        )
        return await self.records(found[:limit]), len(found) > limit

    async def count(self, user_id: str, filters: ConversationFilters) -> int:
        return await conversations.count(self.db, user_id, filters)

    async def records(
        self, rows: list[ConversationRow], live: bool = True
    ) -> list[AppConversation]:
        children = await conversations.children(self.db, [r.id for r in rows])
        return list(
            await asyncio.gather(*(self.record(r, live, children.get(r.id, [])) for r in rows))
        )

    async def record(
        self, row: ConversationRow, live: bool = True, children: list[str] | None = None
    ) -> AppConversation:
        if children is None:
            children = (await conversations.children(self.db, [row.id])).get(row.id, [])
        status = ExecutionStatus.parse(row.execution_status) if row.execution_status else None
        url = key = None
        if row.sandbox_status is SandboxStatus.RUNNING:
            sandbox = await self.sandboxes.rows.get(row.sandbox_id)
            base = None if sandbox is None else self.sandboxes.url(sandbox)
            if sandbox is not None and base is not None:
                key = self.sandboxes.session_key(sandbox)
                url = f"{base}/api/conversations/{row.id}"
                if live:
                    try:
                        info = await asyncio.wait_for(
                            self.agents.get_conversation(Target(base, key), row.id), timeout=2
                        )
                        status = ExecutionStatus.parse(info.get("execution_status")) or status
                    except (TimeoutError, AgentError):
                        pass  # the stored value is the best we know
        obs = row.observability or {}
        return AppConversation(
            id=row.id,
            app_conversation_id=row.id,
            created_by_user_id=row.user_id,
            sandbox_id=row.sandbox_id,
            sandbox_status=row.sandbox_status,
            execution_status=status,
            selected_repository=row.selected_repository,
            selected_branch=row.selected_branch,
            git_provider=row.git_provider,
            title=row.title,
            trigger=row.trigger,
            pr_number=row.pr_number or [],
            llm_model=row.llm_model,
            public=row.public,
            parent_conversation_id=row.parent_conversation_id,
            sub_conversation_ids=children,
            tags=row.tags,
            metrics=Metrics.stored(row.metrics),
            observability_span_name=obs.get("span_name"),
            observability_tags=obs.get("tags") or [],
            observability_metadata=obs.get("metadata") or {},
            working_dir=row.working_dir,
            conversation_url=url,
            session_api_key=key,
            created_at=row.created_at,
            updated_at=row.updated_at,
            last_activity_at=row.last_activity_at,
        )

    async def _target(self, row: ConversationRow, resume: bool) -> Target:
        """The running agent server of the conversation's sandbox; PAUSED is resumed if asked."""
        sandbox = await self.sandboxes.rows.get(row.sandbox_id)
        status = SandboxStatus.MISSING if sandbox is None else sandbox.status
        ensure_usable(
            row.sandbox_id,
            status,
            f"conversation {row.id} is read-only (transcript and events only)",
        )
        assert sandbox is not None
        if sandbox.status is SandboxStatus.PAUSED and resume:
            sandbox = await self.sandboxes.resume(sandbox)
        elif sandbox.status is not SandboxStatus.RUNNING:
            raise Conflict(f"sandbox {row.sandbox_id} is {sandbox.status.value}; resume it first")
        target = self.sandboxes.target(sandbox)
        assert target is not None
        return target

    async def send_message(self, row: ConversationRow, message: dict[str, Any]) -> None:
        target = await self._target(row, resume=True)  # SPEC 3.1: the next access resumes
        try:
            await self.agents.send_message(target, row.id, message)
        except AgentError as exc:
            raise UpstreamError("sandbox", str(exc)) from None
        moment = self.db.now()
        async with self.db.begin() as conn:
            await self.sandboxes.rows.touch(conn, row.sandbox_id, moment=moment)
        await conversations.update_fields(self.db, row.id, last_activity_at=moment)

    async def control(
        self, row: ConversationRow, action: str, body: dict[str, Any] | None, *, resume: bool
    ) -> None:
        """A control call on the agent server's conversation (CONTROLS). The agent server's
        409 (e.g. nothing to confirm) is passed on; any other refusal is its failure: 502."""
        target = await self._target(row, resume=resume)
        try:
            await self.agents.post(target, f"/api/conversations/{row.id}{CONTROLS[action]}", body)
        except AgentError as exc:
            if exc.status == 409:
                raise Conflict(str(exc)) from None
            raise UpstreamError("sandbox", str(exc)) from None
        async with self.db.begin() as conn:
            await self.sandboxes.rows.touch(conn, row.sandbox_id)

    async def inspect(self, row: ConversationRow, what: str, params: dict[str, str]) -> Raw:
        target = await self._target(row, resume=True)
        try:
            raw = await self.agents.raw_get(
                target, f"/api/conversations/{row.id}{INSPECTION[what]}", params
            )
        except AgentError as exc:
            raise UpstreamError("sandbox", str(exc)) from None
        if raw.status >= 500 or raw.status == 401:
            raise UpstreamError("sandbox", f"the agent server answered {raw.status}")
        await self.touch(row)
        return raw

    async def inspect_sandbox(self, row: ConversationRow, what: str, params: dict[str, str]) -> Raw:
        """As `inspect`, over the whole workspace of the conversation's sandbox (the agent
        server's own routes, `SANDBOX_INSPECTION`: confined to its workspace, not to this
        conversation's directory in it)."""
        target = await self._target(row, resume=True)
        try:
            raw = await self.agents.raw_get(target, SANDBOX_INSPECTION[what], params)
        except AgentError as exc:
            raise UpstreamError("sandbox", str(exc)) from None
        if raw.status >= 500 or raw.status == 401:
            raise UpstreamError("sandbox", f"the agent server answered {raw.status}")
        await self.touch(row)
        return raw

    async def update(self, row: ConversationRow, fields: dict[str, Any]) -> ConversationRow:
        await conversations.update_fields(self.db, row.id, **fields)
        found = await conversations.get(self.db, row.id)
        assert found is not None
        return found

    async def delete(self, row: ConversationRow) -> bool:
        """Remove it (and its events); the sandbox goes with its last conversation (SPEC 3.1).

        Returns whether the sandbox was removed too."""
        sandbox = await self.sandboxes.rows.get(row.sandbox_id)
        # A paused sandbox that keeps other conversations is thawed just long enough to delete
        # this one's copy there, then paused again with its reason: nothing is left behind.
        repause = (
            sandbox is not None
            and sandbox.status is SandboxStatus.PAUSED
            and await self.sandboxes.rows.conversation_count(sandbox.id) > 1
        )
        reason = (sandbox.status_reason or SandboxReason.USER) if sandbox is not None else None
        detail = sandbox.status_detail if sandbox is not None else None
        if repause:
            assert sandbox is not None
            sandbox = await self.sandboxes.resume(sandbox, brief=True)
        target = self.sandboxes.target(sandbox) if sandbox is not None else None
        if sandbox is not None and sandbox.status is SandboxStatus.RUNNING and target is not None:
            try:
                await self.agents.delete_conversation(target, row.id)
            except AgentError:
                pass  # the sandbox's copy is unreachable; ours goes regardless
        if repause:
            assert sandbox is not None and reason is not None
            sandbox = await self.sandboxes.pause(sandbox, reason, detail, brief=True)
        async with self.db.begin() as conn:
            await conversations.remove(conn, row.id)
        await events.remove(self.db, row.id)
        if (
            sandbox is not None
            and not sandbox.status.terminal
            and await self.sandboxes.rows.conversation_count(sandbox.id) == 0
        ):
            await self.sandboxes.destroy(sandbox)
            return True
        return False

    async def download(self, row: ConversationRow) -> AsyncIterator[bytes]:
        """The trajectory as a zip (meta.json: the record; events.jsonl: every stored event;
        and, as the OpenHands app server writes it, `event_{i:06d}_{id}.json` per event, for
        the first EXPORT_EVENT_FILES), streamed: events are read a chunk at a time and the zip
        sent as it is written, so a long conversation never sits in memory whole."""
        record = await self.record(row, live=False)
        meta = record.model_dump(mode="json", exclude={"session_api_key", "conversation_url"})
        sink = _Sink()
        with zipfile.ZipFile(sink, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("meta.json", json.dumps(meta, indent=2))
            with archive.open("events.jsonl", "w", force_zip64=True) as member:
                async for body in events.all_bodies(self.db, row.id):
                    member.write(body.encode() + b"\n")
                    if sink.size() >= 256 * 1024:
                        yield sink.take()
            i = 0
            async for body in events.all_bodies(self.db, row.id):
                if i >= EXPORT_EVENT_FILES:
                    break
                event = json.loads(body)
                archive.writestr(
                    f"event_{i:06d}_{event.get('id')}.json", json.dumps(event, indent=2)
                )
                i += 1
                if sink.size() >= 256 * 1024:
                    yield sink.take()
        yield sink.take()


class _Sink(io.RawIOBase):
    """A write-only stream zipfile writes into and the response drains (no seeking: zipfile
    then writes data descriptors after each member)."""

    def __init__(self) -> None:
        super().__init__()
        self._chunks: list[bytes] = []
        self._size = 0
        self._position = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._chunks.append(chunk)
        self._size += len(chunk)
        self._position += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self._position

    def size(self) -> int:
        return self._size

    def take(self) -> bytes:
        out = b"".join(self._chunks)
        self._chunks, self._size = [], 0
        return out
