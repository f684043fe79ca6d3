"""core.retry: the backoff schedule, Retry-After, and the clock seam."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from core.retry import Backoff, Clock, parse_retry_after


def test_delays_grow_with_jitter_up_to_the_maximum() -> None:
    backoff = Backoff(1.0, 60.0, random.Random(1))
    for failures, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (6, 32.0), (7, 60.0), (500, 60.0)]:
        delays = {backoff.delay(failures) for _ in range(50)}
        assert all(max(1.0, ceiling / 2) <= d <= ceiling for d in delays), failures
        assert len(delays) > 1 or ceiling == 1.0  # jittered, except where the floor pins it


def test_full_jitter_spreads_from_half_the_minimum() -> None:
    backoff = Backoff(1.0, 30.0, random.Random(2), full_jitter=True)
    delays = [backoff.delay(10) for _ in range(500)]
    assert 0.5 <= min(delays) < 5 and 25 < max(delays) <= 30.0


def test_retry_after_is_bounded_both_ways() -> None:
    backoff = Backoff(1.0, 60.0)
    assert backoff.retry_after(3600) == 60 and backoff.retry_after(0) == 1
    llm_like = Backoff(1.0, 30.0, full_jitter=True, retry_after_bounds=(0.0, 120.0))
    assert llm_like.retry_after(90) == 90 and llm_like.retry_after(600) == 120
    assert llm_like.retry_after(0.3) == 0.3 and llm_like.retry_after(-5) == 0


def test_wait_prefers_what_the_server_asked_for() -> None:
    backoff = Backoff(1.0, 60.0, random.Random(3))
    assert backoff.wait(5, 7.0) == 7.0
    assert 8.0 <= backoff.wait(5, None) <= 16.0


@pytest.mark.parametrize(
    "value, seconds",
    [
        ("2.5", 2.5),
        (" 10 ", 10.0),
        ("-3", 0.0),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_in_seconds(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, now=1000.0) == seconds


def test_retry_after_as_a_date_is_counted_from_now() -> None:
    now = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    later = format_datetime(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC), usegmt=True)
    assert parse_retry_after(later, now) == 30.0
    assert parse_retry_after(later, now + 60) == 0.0  # a date in the past: now


async def test_the_clock_tells_time_and_sleeps() -> None:
    clock = Clock()
    assert abs(clock.time() - time.time()) < 1
    start = clock.monotonic()
    await clock.sleep(0.05)
    assert clock.monotonic() - start >= 0.04
