"""LLM usage rows: what the gateway forwarded, per user, sandbox and UTC day (`llm_usage`).

One row per (user, sandbox, day), added to by an upsert (SQLite and PostgreSQL share the
`INSERT ... ON CONFLICT DO UPDATE` form), so concurrent calls of one sandbox never lose a count
and never need a read first. Rows outlive their sandbox: what it spent stays spent.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite

from control_plane.models import UsageRow
from control_plane.store.db import Database
from control_plane.store.tables import llm_usage as U


def _row(row: Any) -> UsageRow:
    data = dict(row._mapping)
    return UsageRow(
        **{
            **data,
            "requests": int(data["requests"]),
            "prompt_tokens": int(data["prompt_tokens"]),
            "completion_tokens": int(data["completion_tokens"]),
            "cost_usd": float(data["cost_usd"]),
        }
    )


async def add(
    db: Database,
    user_id: str,
    sandbox_id: str,
    day: str,
    *,
    requests: int = 1,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    cost_usd: float = 0.0,
) -> None:
    """Add one call's counts to the day's row of the sandbox (made when it is the first)."""
    insert = (postgresql.insert if db.dialect == "postgresql" else sqlite.insert)(U)
    values = insert.values(
        user_id=user_id,
        sandbox_id=sandbox_id,
        day=day,
        requests=requests,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=cost_usd,
        updated_at=db.now(),
    )
    new = values.excluded
    query = values.on_conflict_do_update(
        index_elements=[U.c.user_id, U.c.sandbox_id, U.c.day],
        set_={
            "requests": U.c.requests + new.requests,
            "prompt_tokens": U.c.prompt_tokens + new.prompt_tokens,
            "completion_tokens": U.c.completion_tokens + new.completion_tokens,
            "cost_usd": U.c.cost_usd + new.cost_usd,
            "updated_at": new.updated_at,
        },
    )
    async with db.begin() as conn:
        await conn.execute(query)


async def spent(db: Database, user_id: str, day: str) -> float:
    """The user's cost on `day`, all sandboxes together (USD)."""
    query = select(func.coalesce(func.sum(U.c.cost_usd), 0.0)).where(
        U.c.user_id == user_id, U.c.day == day
    )
    async with db.connect() as conn:
        return float(await conn.scalar(query) or 0.0)


async def day_total(db: Database, user_id: str, day: str) -> tuple[int, int, int, float]:
    """The user's requests, prompt and completion tokens and cost on `day`, all sandboxes."""
    query = select(
        *(
            func.coalesce(func.sum(c), 0)
            for c in (U.c.requests, U.c.prompt_tokens, U.c.completion_tokens, U.c.cost_usd)
        )
    ).where(U.c.user_id == user_id, U.c.day == day)
    async with db.connect() as conn:
        requests, prompt, completion, cost = (await conn.execute(query)).one()
    return int(requests), int(prompt), int(completion), float(cost)


async def since(
    db: Database, user_id: str, first_day: str, limit: int | None = None
) -> list[UsageRow]:
    """The user's rows from `first_day` on (days as text sort as dates), newest day first,
    then by sandbox; `limit` at most (the API's answer has one)."""
    query = (
        select(U)
        .where(U.c.user_id == user_id, U.c.day >= first_day)
        .order_by(U.c.day.desc(), U.c.sandbox_id)
        .limit(limit)
    )
    async with db.connect(aside=True) as conn:
        return [_row(r) for r in await conn.execute(query)]
