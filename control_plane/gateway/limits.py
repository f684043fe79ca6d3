"""A user's limits on the LLM through the gateway: a daily budget in USD and a number of
requests per minute, checked before a request is forwarded.

Each has a deployment cap (`Config.llm_daily_budget_usd`, `llm_requests_per_minute`) and the
user's own setting of the same name, which may only lower it: the smaller applies, and the
refusal says whose it was.

- The budget: what the user's sandboxes spent today (UTC, `llm_usage` summed over them) at or
  past the budget refuses until the next midnight UTC (402: see `errors` for why not 429).
  Spending is counted when a call ends and checked before the next, so calls in flight
  together may pass the budget by their own cost; the next one is refused.
- The rate: requests admitted in the current minute (UTC, by the control plane's clock) at
  the limit refuses until the next minute (429, Retry-After to it). It is counted in this
  process's memory, per user: with several control planes a user may get up to the limit on
  each, and a restart starts the minute afresh. Users idle for a minute or more are forgotten
  (once the table holds more than 1024 users, those not seen since the minute before are
  dropped), so it never grows with the users a deployment ever had.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from control_plane.config import Config
from control_plane.gateway.errors import Kind, Refusal
from control_plane.settings import UserSettings
from control_plane.store import Database, usage


@dataclass(frozen=True)
class Limit:
    value: float
    whose: str
    """"your setting" or "the deployment's cap": told in a refusal."""


@dataclass(frozen=True)
class Caps:
    budget_usd: Limit | None
    per_minute: Limit | None


def _smaller(cap: float | None, own: float | None) -> Limit | None:
    if own is not None and (cap is None or own < cap):
        return Limit(own, "your setting")
    return None if cap is None else Limit(cap, "the deployment's cap")


def caps(config: Config, settings: UserSettings) -> Caps:
    """The limits that hold for a user: the smaller of the deployment's and the user's own."""
    return Caps(
        _smaller(config.llm_daily_budget_usd, settings.llm_daily_budget_usd),
        _smaller(config.llm_requests_per_minute, settings.llm_requests_per_minute),
    )


def day_of(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d")


def next_midnight(moment: datetime) -> datetime:
    start = moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return start + timedelta(days=1)


def usd(amount: float) -> str:
    """$5, $0.5, $0.000081: to the millionth, no trailing zeros."""
    return "$" + f"{amount:,.6f}".rstrip("0").rstrip(".")


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _wait(moment: datetime, until: datetime) -> dict[str, str]:
    seconds = max(1, math.ceil((until - moment).total_seconds()))
    return {"Retry-After": str(seconds)}


class Limits:
    """The budget and rate checks; `admit` before each forwarded request."""

    def __init__(self, db: Database, config: Config) -> None:
        self.db = db
        self.config = config
        #: user id -> (the minute, as whole minutes since 1970, requests admitted in it)
        self._minutes: dict[str, tuple[int, int]] = {}

    async def admit(self, user_id: str, settings: UserSettings) -> None:
        """Refusal when a limit of the user's is reached; otherwise the request is counted in
        this minute's."""
        limits = caps(self.config, settings)
        now = self.db.now()
        if limits.budget_usd is not None:
            await self._budget(user_id, limits.budget_usd, now)
        if limits.per_minute is not None:
            self._rate(user_id, limits.per_minute, now)

    async def _budget(self, user_id: str, budget: Limit, now: datetime) -> None:
        used = await usage.spent(self.db, user_id, day_of(now))
        if used < budget.value:
            return
        resets = next_midnight(now)
        raise Refusal(
            Kind.BUDGET,
            (
                f"The daily LLM budget is spent: {usd(budget.value)} per day "
                f"(UTC, {budget.whose}); "
                f"{usd(used)} used today. It resets at {iso(resets)}. No further model calls "
                "go through until then; raise the budget in your settings to go on sooner."
            ),
            _wait(now, resets),
        )

    def _rate(self, user_id: str, per_minute: Limit, now: datetime) -> None:
        minute = int(now.timestamp() // 60)
        if len(self._minutes) > 1024:  # forget users idle since the minute before
            self._minutes = {u: m for u, m in self._minutes.items() if m[0] >= minute - 1}
        seen, count = self._minutes.get(user_id, (minute, 0))
        count = count if seen == minute else 0
        if count >= per_minute.value:
            resets = datetime.fromtimestamp((minute + 1) * 60, UTC)
            raise Refusal(
                Kind.RATE,
                (
                    f"LLM rate limit reached: {per_minute.value:g} requests per minute "
                    f"({per_minute.whose}); {count} made this minute. It resets at {iso(resets)}."
                ),
                _wait(now, resets),
            )
        self._minutes[user_id] = (minute, count + 1)
