"""Admission of webhook batches: how many one sandbox may have in flight, and how many bytes all
of them may hold at once.

A batch costs a few times its size in memory while it is parsed, checked and stored (the body,
the events, their JSON again), and an agent server sends one request per conversation at once:
unbounded, a few sandboxes sending their largest batches together take the machine's memory.
A batch past a bound is refused before its body is read (429 with Retry-After); the agent
server keeps it and sends it again then (its webhook retries a 429). One batch alone is always
admitted, whatever its size (up to `max_webhook_body_bytes`), so none waits for ever.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from web.errors import LimitReached

#: Seconds a refused sender is told to wait before it sends again.
RETRY_AFTER = 1


class Busy(LimitReached):
    """A bound of the intake is reached right now; the same batch is welcome a moment later."""

    @property
    def headers(self) -> dict[str, str] | None:
        return {"Retry-After": str(RETRY_AFTER)}


class Intake:
    def __init__(self, per_sandbox: int, budget: int) -> None:
        self.per_sandbox = per_sandbox
        self.budget = budget
        self._batches: dict[str, int] = {}
        self._bytes = 0

    @contextlib.contextmanager
    def admit(self, sandbox_id: str, size: int) -> Iterator[None]:
        """Hold a place for a batch of `size` bytes from `sandbox_id` while it is received and
        stored; Busy when the sandbox has `per_sandbox` in flight, or when the bytes in flight
        would pass the budget."""
        held = self._batches.get(sandbox_id, 0)
        if held >= self.per_sandbox:
            raise Busy(f"this sandbox has {held} batches in flight already: send again later")
        if self._bytes and self._bytes + size > self.budget:
            raise Busy(
                "the control plane is receiving as many events as it holds at once: "
                "send again later"
            )
        self._batches[sandbox_id] = held + 1
        self._bytes += size
        try:
            yield
        finally:
            self._bytes -= size
            left = self._batches[sandbox_id] - 1
            if left:
                self._batches[sandbox_id] = left
            else:
                del self._batches[sandbox_id]
