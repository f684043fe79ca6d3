"""The webhook receiver's work (SPEC 4.5): who posts, what they post, and storing it once.

A sandbox is known by the Standard Webhooks signature its agent server puts on each delivery
(`X-Webhook-Sender` names the sandbox; the secret, derived from the sandbox's own, never
travels: `core.signing`), or, from an agent server that does not sign, by its session key
(looked up by hash). The body must be an array of the 19
event kinds of the agent server's own schema, each id a ULID or a UUID (SPEC 6.1): an id is
written into the live stream's frames and a column of bounded width, so any other text is
refused here (422) on every backend alike.

A conversation made straight on a sandbox's agent server (the OpenHands Cloud workspace does
that) is unknown here until its first post: it is recorded then, owned by the sandbox's user,
as the OpenHands app server does, and shown in /api/v1 like the others. Its conversation info
(POST /webhooks/conversations, which the agent server sends when a conversation starts, is
paused, updated or deleted) fills in its title, model, working directory and metrics. A
conversation this control plane started and then removed (deleted, or its start failed) is
never brought back: what its sandbox still sends is acknowledged and dropped. Events are
inserted idempotently by (conversation, event id) in one transaction with the record's execution
status, metrics and activity, so a replayed batch changes nothing and a failed insert stores
nothing: the agent server is answered 5xx and sends the batch again.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from control_plane.app_conversations import metrics_from_stats
from control_plane.crypto import Cipher, webhook_secret
from control_plane.models import ConversationRow, SandboxRow, stored_status
from control_plane.relay import Bell
from control_plane.sandboxes.rows import SandboxRows
from control_plane.store import Database, accounts, conversations, tasks
from control_plane.store.tables import app_conversations, events
from control_plane.telemetry import annotate
from control_plane.telemetry.metrics import PlaneMetrics
from core.ids import EVENT_ID_PATTERN
from core.signing import TOLERANCE, signing_key, verify
from events import kinds
from events.kinds import parse_timestamp
from events.status import ExecutionStatus
from web.errors import Gone, LimitReached, Unauthorized, Unavailable, from_pydantic, invalid

logger = logging.getLogger(__name__)
#: An event id as stored: the agent server's ULID, or a UUID (other SDKs' events).
STORED_ID = re.compile(
    rf"\A(?:{EVENT_ID_PATTERN}"
    r"|[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})\Z"
)


def _event_id(event: Any, body: str) -> str:
    """The event's own id; an event sent without one gets an id derived from its content,
    so sending it again is still recognised."""
    if event.id:
        return str(event.id)
    return str(uuid.uuid5(uuid.NAMESPACE_OID, hashlib.sha256(body.encode()).hexdigest()))


class ConversationUpdate(BaseModel):
    """What is read of an agent server's conversation info (ours or the public one's)."""

    model_config = ConfigDict(extra="ignore")

    id: uuid.UUID
    execution_status: str | None = Field(default=None, max_length=40)
    title: str | None = Field(default=None, max_length=200)
    tags: dict[str, Annotated[str, Field(max_length=256)]] = Field(
        default_factory=dict, max_length=50
    )
    agent: dict[str, Any] = Field(default_factory=dict)
    workspace: dict[str, Any] = Field(default_factory=dict)
    stats: dict[str, Any] = Field(default_factory=dict)
    parent_conversation_id: uuid.UUID | None = None

    @property
    def llm_model(self) -> str | None:
        llm = self.agent.get("llm")
        model = llm.get("model") if isinstance(llm, dict) else None
        return model[:200] if isinstance(model, str) and model else None

    @property
    def working_dir(self) -> str | None:
        value = self.workspace.get("working_dir")
        return value if isinstance(value, str) and value.startswith("/") else None


class WebhookReceiver:
    def __init__(
        self,
        db: Database,
        cipher: Cipher,
        bell: Bell | None = None,
        working_dir: Callable[[SandboxRow], str] | None = None,
        *,
        cap: int = 500,
        metrics: PlaneMetrics | None = None,
    ) -> None:
        """`working_dir`: a sandbox's workspace as its processes see it (where a conversation
        made straight on its agent server works unless its info says otherwise); `cap`: the
        conversations one sandbox may have recorded that way."""
        self.db = db
        self.sandboxes = SandboxRows(db)
        self.cipher = cipher
        self.cap = cap
        self.bell = bell or Bell()
        self.working_dir = working_dir or (lambda row: f"{row.root_dir}/workspace")
        self.metrics = metrics or PlaneMetrics()

    async def sender(self, headers: Mapping[str, str]) -> SandboxRow:
        """The sandbox a delivery says it comes from (`X-Webhook-Sender`, checked against the
        body's signature by `check`), or whose session key it carries; Unauthorized for none
        or an unknown one."""
        named = headers.get("x-webhook-sender")
        if named:
            # What can be checked before the body is read (and a batch slot of the sandbox
            # taken for it): a signature of now is there.
            stamp = headers.get("webhook-timestamp", "")
            if not (
                headers.get("webhook-id")
                and headers.get("webhook-signature")
                and stamp.isdigit()
                and abs(time.time() - int(stamp)) <= TOLERANCE
            ):
                raise Unauthorized(
                    "a signed delivery has webhook-id, webhook-signature and a "
                    "webhook-timestamp of now"
                )
            try:
                return await self.sandboxes.current(named[:64])
            except Gone:
                raise Unauthorized("unknown webhook sender") from None
        session_key = headers.get("x-session-api-key")
        if not session_key:
            raise Unauthorized(
                "a Standard Webhooks signature (X-Webhook-Sender, webhook-id, "
                "webhook-timestamp, webhook-signature) or X-Session-API-Key "
                "is required"
            )
        return await self.sandboxes.by_session_key(session_key, live=False)

    def check(self, sandbox: SandboxRow, headers: Mapping[str, str], body: bytes) -> None:
        """Unauthorized unless a delivery named by its sender is signed by that sandbox's
        secret, within the standard's five minutes (one by session key was checked already)."""
        if not headers.get("x-webhook-sender"):
            return
        key = signing_key(webhook_secret(self.cipher, sandbox.id, sandbox.session_key_hash))
        # The wall clock, as the sender's: the store's clock is the timers' (a test moves it).
        problem = verify(key, headers, body, time.time())
        if problem is not None:
            raise Unauthorized(f"webhook signature refused: {problem}")

    async def _ours(
        self, sandbox: SandboxRow, conversation_id: str
    ) -> ConversationRow | None | Literal["drop"]:
        """The conversation, checked to be the sandbox's; None when it is unknown here and
        this control plane never started it (the caller records it then); "drop" when what
        the sandbox sends is to be acknowledged and dropped: the conversation was started here
        and removed, or it is another sandbox's. The latter is answered as the others are, so
        a sandbox learns nothing of which conversations exist beside its own."""
        conversation = await conversations.get(self.db, conversation_id)
        if conversation is not None and conversation.sandbox_id != sandbox.id:
            logger.warning(
                "sandbox %s posted for conversation %s, another sandbox's: dropped",
                sandbox.id,
                conversation_id,
            )
            return "drop"
        if conversation is None and await tasks.started_here(self.db, conversation_id):
            return "drop"  # removed here (deleted, or its start failed): not brought back
        return conversation

    async def _record(
        self,
        conn: AsyncConnection,
        sandbox: SandboxRow,
        conversation_id: str,
        info: ConversationUpdate | None,
    ) -> None:
        """A record for a conversation first heard of here, within the sandbox's cap (counted
        under its user's lock, as a start counts its sandbox's conversations)."""
        await accounts.lock_user(conn, sandbox.user_id)
        if await self.sandboxes.conversations_in(conn, sandbox.id, recorded_only=True) >= self.cap:
            raise LimitReached(
                f"sandbox {sandbox.id} has {self.cap} conversations made on its "
                "agent server, its most: delete some to have more recorded"
            )
        await conn.execute(
            self.db.insert_ignoring_duplicates(app_conversations),
            [self._new_row(sandbox, conversation_id, info)],
        )

    def _new_row(
        self, sandbox: SandboxRow, conversation_id: str, info: ConversationUpdate | None
    ) -> dict[str, Any]:
        moment = self.db.now()
        return {
            "id": conversation_id,
            "user_id": sandbox.user_id,
            "sandbox_id": sandbox.id,
            "start_task_id": None,
            "started": True,
            "tags": info.tags if info else {},
            "title": info.title if info else None,
            "working_dir": (info and info.working_dir) or self.working_dir(sandbox),
            "llm_model": info.llm_model if info else None,
            "parent_conversation_id": (
                str(info.parent_conversation_id) if info and info.parent_conversation_id else None
            ),
            "created_at": moment,
            "updated_at": moment,
            "last_activity_at": moment,
        }

    async def conversation(self, sandbox: SandboxRow, body: bytes) -> None:
        """POST /webhooks/conversations: an agent server's conversation info. A deletion
        notice changes nothing (the conversation is deleted through /api/v1)."""
        try:
            info = ConversationUpdate.model_validate_json(body)
        except ValidationError as exc:
            raise from_pydantic(exc, "body") from None
        if (info.execution_status or "").lower() == "deleting":
            return
        conversation_id = str(info.id)
        existing = await self._ours(sandbox, conversation_id)
        if existing == "drop":
            return
        status = ExecutionStatus.parse(info.execution_status)
        metrics = metrics_from_stats(info.stats)
        values: dict[str, Any] = {"updated_at": self.db.now()}
        if status is not None:
            values["execution_status"] = stored_status(status)
        if metrics is not None:
            values["metrics"] = metrics
        if info.llm_model:
            values["llm_model"] = info.llm_model
        async with self.db.begin() as conn:
            if existing is None:
                await self._record(conn, sandbox, conversation_id, info)
            elif existing.start_task_id is None:  # made on the agent server: its info rules
                values.update(
                    tags={**existing.tags, **info.tags}, title=existing.title or info.title
                )
            await conn.execute(
                update(app_conversations)
                .where(app_conversations.c.id == conversation_id)
                .values(**values)
            )
        self.bell.ring(conversation_id)

    async def receive(self, sandbox: SandboxRow, conversation_id: str, body: bytes) -> int:
        """Store a batch (`sender` and `check` said who sent it); returns how many events it
        held."""
        try:
            batch = kinds.EVENT_LIST_ADAPTER.validate_json(body)
        except ValidationError as exc:
            raise from_pydantic(exc, "body") from None
        for index, event in enumerate(batch):
            if event.id is not None and not STORED_ID.match(event.id):
                raise invalid(
                    ["body", index, "id"],
                    "an event id is a ULID or a UUID",
                    "string_pattern_mismatch",
                    event.id,
                )
        conversation = await self._ours(sandbox, conversation_id)
        if conversation == "drop":
            return 0

        rows: list[dict[str, Any]] = []
        status: ExecutionStatus | None = None
        metrics: dict[str, Any] | None = None
        for event in batch:
            if event.kind == "StreamingDeltaEvent":
                continue  # transient by definition (SPEC 6.2): never stored
            text = event.model_dump_json()
            rows.append(
                {
                    "conversation_id": conversation_id,
                    "event_id": _event_id(event, text),
                    "kind": event.kind,
                    "source": event.source,
                    "timestamp": event.timestamp,
                    "body": text,
                }
            )
            if event.kind == "ConversationStateUpdateEvent":
                key, value = getattr(event, "key", None), getattr(event, "value", None)
                if key == "execution_status":
                    status = ExecutionStatus.parse(value) or status
                elif key == "stats":
                    metrics = metrics_from_stats(value) or metrics
        moment = self.db.now()
        values: dict[str, Any] = {"last_activity_at": moment}
        if status is not None:
            values["execution_status"] = stored_status(status)
        if metrics is not None:
            values["metrics"] = metrics
        try:
            async with self.db.begin() as conn:
                if conversation is None:
                    await self._record(conn, sandbox, conversation_id, None)
                if rows:
                    await conn.execute(self.db.insert_ignoring_duplicates(events), rows)
                await conn.execute(
                    update(app_conversations)
                    .where(app_conversations.c.id == conversation_id)
                    .values(**values)
                )
                await self.sandboxes.touch(conn, sandbox.id, moment=moment)
        except SQLAlchemyError as exc:
            logger.error("webhook batch of %s not stored: %s", conversation_id, exc)
            raise Unavailable("events could not be stored; send the batch again") from None
        if rows:
            self.bell.ring(conversation_id)  # the live relays read what was just stored
        self._measured(rows)
        return len(rows)

    def _measured(self, rows: list[dict[str, Any]]) -> None:
        """The batch's size and each event's lag, its timestamp to now (the wall clock's:
        the sandbox stamped it so)."""
        now = datetime.now(UTC)
        lags = [
            (now - parse_timestamp(row["timestamp"])).total_seconds()
            for row in rows
            if isinstance(row["timestamp"], str)
        ]
        self.metrics.webhook_batch_stored(len(rows), lags)
        annotate({"control_plane.webhook.events": len(rows)})
