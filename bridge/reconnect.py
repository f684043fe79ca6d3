"""Reconnect: how an event stream that dropped is tried again, and when that stops.

The service may restart (an agent server after a crash, a control plane behind a balancer):
a dropped stream is opened again with backoff, from the last stored event it delivered. One
that cannot be opened again for `window` seconds is given up on, so a prompt in flight ends
with an error the editor shows instead of hanging.
"""

from __future__ import annotations

from bridge.errors import BridgeError, Unreachable
from core.retry import Backoff, Clock


class Reconnect:
    def __init__(self, window: float, clock: Clock | None = None) -> None:
        self.window = window
        self.clock = clock or Clock()
        self.backoff = Backoff(minimum=0.2, maximum=5.0)
        self._failures = 0
        self._since: float | None = None

    def connected(self) -> None:
        """A stream is open and delivering: the next drop starts a new window."""
        self._failures = 0
        self._since = None

    async def wait(self, error: BridgeError) -> None:
        """Sleep before the next try; Unreachable (naming `error`) once the window is over."""
        now = self.clock.monotonic()
        if self._since is None:
            self._since = now
        left = self.window - (now - self._since)
        if left <= 0:
            raise Unreachable(f"{error.message}; gave up after {self.window:g} s of trying again")
        self._failures += 1
        await self.clock.sleep(min(self.backoff.delay(self._failures), left))


__all__ = ["Reconnect"]
