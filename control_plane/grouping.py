"""Placement of a new conversation onto a sandbox by the user's grouping strategy (SPEC 1).

'Available' means RUNNING, the same sandbox spec, owned by the user and below the per-sandbox
conversation cap. The caller runs `candidates` inside the transaction that has locked the user
(`store.accounts.lock_user`) and inserts the conversation in that same transaction, so two
starts at the same moment never both take a sandbox's last free place.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from control_plane.models import GroupingStrategy, SandboxStatus
from control_plane.store.tables import app_conversations, sandboxes


@dataclass(frozen=True)
class Candidate:
    id: str
    created_at: datetime
    last_activity_at: datetime
    conversations: int


async def candidates(
    conn: AsyncConnection, user_id: str, spec_id: str, cap: int
) -> list[Candidate]:
    load = func.count(app_conversations.c.id)
    query = (
        select(
            sandboxes.c.id, sandboxes.c.created_at, sandboxes.c.last_activity_at, load.label("n")
        )
        .select_from(
            sandboxes.outerjoin(app_conversations, app_conversations.c.sandbox_id == sandboxes.c.id)
        )
        .where(
            sandboxes.c.user_id == user_id,
            sandboxes.c.spec_id == spec_id,
            sandboxes.c.status == SandboxStatus.RUNNING.value,
        )
        .group_by(sandboxes.c.id, sandboxes.c.created_at, sandboxes.c.last_activity_at)
        .having(load < cap)
        .order_by(sandboxes.c.created_at, sandboxes.c.id)
    )
    return [
        Candidate(r.id, r.created_at, r.last_activity_at, int(r.n))
        for r in await conn.execute(query)
    ]


def choose(strategy: GroupingStrategy, available: list[Candidate]) -> str | None:
    """The sandbox to join, or None for a new one. `available` is oldest first."""
    if strategy is GroupingStrategy.NO_GROUPING or not available:
        return None
    if strategy is GroupingStrategy.GROUP_BY_NEWEST:
        return max(available, key=lambda c: (c.created_at, c.id)).id
    if strategy is GroupingStrategy.LEAST_RECENTLY_USED:
        return min(available, key=lambda c: (c.last_activity_at, c.created_at)).id
    if strategy is GroupingStrategy.FEWEST_CONVERSATIONS:
        return min(available, key=lambda c: (c.conversations, c.created_at)).id
    return available[0].id  # ADD_TO_ANY: the first available (the oldest, for a stable answer)
