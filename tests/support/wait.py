"""Waiting for a condition, never for a time: a loaded 2-core machine stretches every delay."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T], timeout: float = 30, interval: float = 0.02, what: str = ""
) -> T:
    """Poll until predicate() is truthy and return its value; AssertionError naming `what`
    (or the predicate) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)
