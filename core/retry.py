"""Waiting before trying again: a clock seam, a backoff schedule and the Retry-After header.

Every outbound caller (the webhook, the LLM call, the control plane's requests) retries the
same way, so that a receiver that says Retry-After is obeyed everywhere and tests can drive
the schedule without sleeping.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from dataclasses import dataclass, field
from datetime import UTC


class Clock:
    """Time and sleeping for retry code; tests pass one that records instead of waiting."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass
class Backoff:
    """Exponential backoff with jitter, so that many clients failing together do not retry
    together.

    Failure n has a ceiling of `minimum * 2**(n-1)`, at most `maximum`. By default the wait
    is between half of the ceiling and all of it, never below `minimum`; with `full_jitter`
    it is anywhere from `minimum / 2` to the ceiling (a wider spread for callers that retry
    only a few times). A server's Retry-After is obeyed within `retry_after_bounds`
    (`(minimum, maximum)` when not given).
    """

    minimum: float = 1.0
    maximum: float = 60.0
    rng: random.Random = field(default_factory=random.Random)
    full_jitter: bool = False
    retry_after_bounds: tuple[float, float] | None = None

    def delay(self, failures: int) -> float:
        """Seconds to wait after the `failures`-th failure in a row (1-based)."""
        ceiling = min(self.maximum, self.minimum * 2 ** min(max(failures - 1, 0), 62))
        if self.full_jitter:
            return self.rng.uniform(self.minimum / 2, ceiling)
        return min(self.maximum, max(self.minimum, self.rng.uniform(ceiling / 2, ceiling)))

    def retry_after(self, seconds: float) -> float:
        """The server's Retry-After, bounded so a recovered server is not left waiting for an
        hour (nor hammered by a zero)."""
        low, high = self.retry_after_bounds or (self.minimum, self.maximum)
        return min(high, max(low, seconds))

    def wait(self, failures: int, retry_after: float | None) -> float:
        """The wait before the next try: what the server asked for, else the schedule's."""
        return self.delay(failures) if retry_after is None else self.retry_after(retry_after)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Retry-After as seconds from `now` (delta-seconds or an HTTP date); None when absent or
    unreadable. `now` is a parameter so that a test's clock decides what "later" means."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, moment.timestamp() - now)


__all__ = ["Backoff", "Clock", "parse_retry_after"]
