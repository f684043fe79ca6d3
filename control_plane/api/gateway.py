"""The LLM gateway's routes: `/api/v1/llm/{path}` for sandboxes' model clients (their own token
as the API key; `control_plane.gateway`), and GET /api/v1/llm-usage for the user: what their
sandboxes used through it, today and per sandbox and day, and the limits that hold."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import Response

from control_plane.api.io import services, user
from control_plane.gateway.limits import next_midnight
from web.io import doc, read_query, reply

#: Rows of one answer at most (a user with many sandboxes over 90 days has more).
MAX_ROWS = 1000


class UsageQuery(BaseModel):
    days: int = Field(default=7, ge=1, le=90)
    """How many UTC days back the rows go, today included."""


class UsageTotals(BaseModel):
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    """As litellm prices the calls; 0 for a model it cannot price."""


class SandboxDay(UsageTotals):
    day: str
    """`YYYY-MM-DD`, UTC."""
    sandbox_id: str


class UsageReport(BaseModel):
    day: str
    """Today, UTC."""
    today: UsageTotals
    """All of today's calls, every sandbox together."""
    daily_budget_usd: float | None
    """The budget that holds (the smaller of yours and the deployment's); null: none."""
    requests_per_minute: int | None
    """Likewise for the requests per minute."""
    resets_at: datetime
    """When today's spending starts afresh (midnight UTC)."""
    rows: list[SandboxDay]
    """Per sandbox and day, newest day first; `MAX_ROWS` at most."""
    more: bool = False
    """Rows beyond those were left out (fewer `days` shows them)."""


async def forward(request: Request) -> Response:
    """A sandbox's model call, forwarded to the user's LLM with the user's key. Not in the
    OpenAPI document: the client speaks its provider's API here, errors included."""
    return await services(request).gateway.forward(request, str(request.path_params["path"]))


@doc(
    summary="What your sandboxes used through the LLM gateway: today's totals, and per "
    "sandbox and day for the last `days` days",
    query=UsageQuery,
    response=UsageReport,
)
async def usage(request: Request) -> Response:
    account = await user(request)
    days = read_query(request, UsageQuery).days
    svc = services(request)
    rows, today, (requests, prompt, completion, cost) = await svc.gateway.report(
        account.id, days, MAX_ROWS + 1
    )
    caps = svc.gateway.caps(await svc.settings.get(account.id))
    shown = [
        SandboxDay(
            day=r.day,
            sandbox_id=r.sandbox_id,
            requests=r.requests,
            prompt_tokens=r.prompt_tokens,
            completion_tokens=r.completion_tokens,
            cost_usd=r.cost_usd,
        )
        for r in rows[:MAX_ROWS]
    ]
    totals = UsageTotals(
        requests=requests, prompt_tokens=prompt, completion_tokens=completion, cost_usd=cost
    )
    return reply(
        UsageReport(
            day=today,
            today=totals,
            rows=shown,
            more=len(rows) > MAX_ROWS,
            daily_budget_usd=None if caps.budget_usd is None else caps.budget_usd.value,
            requests_per_minute=None if caps.per_minute is None else int(caps.per_minute.value),
            resets_at=next_midnight(datetime.strptime(today, "%Y-%m-%d").replace(tzinfo=UTC)),
        )
    )
