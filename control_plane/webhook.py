"""The webhook receiver's work (SPEC 4.5): who posts, what they post, and storing it once.

A sandbox is known by its session key (looked up by hash). The body must be an array of the 19
event kinds of the agent server's own schema. Events are inserted idempotently by (conversation,
event id) in one transaction with the record's execution status, metrics and activity, so a
replayed batch changes nothing and a failed insert stores nothing: the agent server is answered
5xx and sends the batch again.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from typing import Any

from pydantic import ValidationError
from sqlalchemy import update
from sqlalchemy.exc import SQLAlchemyError

from control_plane.app_conversations import metrics_from_stats
from control_plane.crypto import hash_key
from control_plane.models import ExecutionStatus
from control_plane.relay import Bell
from control_plane.store import Database, conversations, sandboxes
from control_plane.store.tables import app_conversations, events
from events import kinds
from web.errors import Forbidden, NotFound, Unauthorized, Unavailable, from_pydantic

logger = logging.getLogger(__name__)


def _event_id(event: Any, body: str) -> str:
    """The event's own id; an event sent without one gets an id derived from its content,
    so sending it again is still recognised."""
    if event.id:
        return str(event.id)
    return str(uuid.uuid5(uuid.NAMESPACE_OID, hashlib.sha256(body.encode()).hexdigest()))


class WebhookReceiver:
    def __init__(self, db: Database, bell: Bell | None = None) -> None:
        self.db = db
        self.bell = bell or Bell()

    async def receive(self, session_key: str | None, conversation_id: str, body: bytes) -> int:
        """Store a batch; returns how many events it held."""
        if not session_key:
            raise Unauthorized("X-Session-API-Key is required")
        sandbox = await sandboxes.by_key_hash(self.db, hash_key(session_key))
        if sandbox is None:
            raise Unauthorized("unknown session key")
        conversation = await conversations.get(self.db, conversation_id)
        if conversation is None:
            raise NotFound(f"conversation {conversation_id} not found")
        if conversation.sandbox_id != sandbox.id:
            raise Forbidden("a sandbox may only post events of its own conversations")
        try:
            batch = kinds.EVENT_LIST_ADAPTER.validate_json(body)
        except ValidationError as exc:
            raise from_pydantic(exc, "body") from None

        rows: list[dict[str, Any]] = []
        status: ExecutionStatus | None = None
        metrics: dict[str, Any] | None = None
        for event in batch:
            if event.kind == "StreamingDeltaEvent":
                continue  # transient by definition (SPEC 6.2): never stored
            text = event.model_dump_json()
            rows.append({"conversation_id": conversation_id, "event_id": _event_id(event, text),
                         "kind": event.kind, "source": event.source, "timestamp": event.timestamp,
                         "body": text})
            if event.kind == "ConversationStateUpdateEvent":
                key, value = getattr(event, "key", None), getattr(event, "value", None)
                if key == "execution_status":
                    status = ExecutionStatus.parse(value) or status
                elif key == "stats":
                    metrics = metrics_from_stats(value) or metrics
        moment = self.db.now()
        values: dict[str, Any] = {"last_activity_at": moment}
        if status is not None:
            values["execution_status"] = status.value
        if metrics is not None:
            values["metrics"] = metrics
        try:
            async with self.db.begin() as conn:
                if rows:
                    await conn.execute(self.db.insert_ignoring_duplicates(events), rows)
                await conn.execute(update(app_conversations)
                                   .where(app_conversations.c.id == conversation_id).values(**values))
                await sandboxes.touch(conn, sandbox.id, moment)
        except SQLAlchemyError as exc:
            logger.error("webhook batch of %s not stored: %s", conversation_id, exc)
            raise Unavailable("events could not be stored; send the batch again") from None
        if rows:
            self.bell.ring(conversation_id)  # the live relays read what was just stored
        return len(rows)
