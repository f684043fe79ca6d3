"""What a sandbox's conversations are told when its status changes for a reason: a
ConversationStateUpdateEvent (key `sandbox_status`) in each one's stored events, so the user
reads why a run stopped where they read the run.

A sandbox that became ERROR or MISSING runs nothing any more: a conversation whose run was going
on then would say RUNNING for ever, since the agent server that would have said otherwise is
gone. So those are recorded as ERROR, with an `execution_status` update in their events (what
the agent server itself sends), in the same transaction as the notices.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from control_plane.models import SandboxReason, SandboxStatus, stored_status
from control_plane.store import Database, conversations
from control_plane.store.tables import app_conversations, events
from events.kinds import ConversationStateUpdateEvent, format_timestamp
from events.status import ExecutionStatus

logger = logging.getLogger(__name__)

#: The key of the state updates that tell a conversation its sandbox's status changed.
NOTICE_KEY = "sandbox_status"


def _row(conversation_id: str, event: ConversationStateUpdateEvent) -> dict[str, Any]:
    return {
        "conversation_id": conversation_id,
        "event_id": event.id,
        "kind": event.kind,
        "source": event.source,
        "timestamp": event.timestamp,
        "body": event.model_dump_json(),
    }


async def announce(
    db: Database, sandbox_id: str, status: SandboxStatus, reason: SandboxReason, detail: str | None
) -> list[str]:
    """The notices stored (and runs ended, for a terminal status); the conversations told."""
    moment = db.now()
    stamp = format_timestamp(moment)

    def update(key: str, value: Any) -> ConversationStateUpdateEvent:
        return ConversationStateUpdateEvent(
            id=str(uuid.uuid4()), timestamp=stamp, key=key, value=value
        )

    async with db.begin() as conn:
        found = list(
            await conn.scalars(
                app_conversations.select()
                .with_only_columns(app_conversations.c.id)
                .where(app_conversations.c.sandbox_id == sandbox_id)
            )
        )
        ended = (
            await conversations.end_runs(
                conn, sandbox_id, stored_status(ExecutionStatus.ERROR), moment
            )
            if status.terminal
            else []
        )
        notice = {
            "sandbox_id": sandbox_id,
            "status": status.value,
            "reason": reason.value,
            "detail": detail,
        }
        batch = [_row(cid, update(NOTICE_KEY, notice)) for cid in found]
        batch += [
            _row(cid, update("execution_status", ExecutionStatus.ERROR.value)) for cid in ended
        ]
        if batch:
            await conn.execute(db.insert_ignoring_duplicates(events), batch)
    return found


async def tell(
    db: Database,
    ring: Callable[[str], None] | None,
    sandbox_id: str,
    status: SandboxStatus,
    reason: SandboxReason,
    detail: str | None,
) -> None:
    """`announce`, rung to the live relays; a failure is logged, never raised (the status is
    stored already: a lost notice must not undo or hide it)."""
    try:
        found = await announce(db, sandbox_id, status, reason, detail)
    except Exception:
        logger.exception("telling the conversations of sandbox %s failed", sandbox_id)
        return
    if ring is not None:
        for conversation_id in found:
            ring(conversation_id)
