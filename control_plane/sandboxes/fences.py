"""Swarm nodes' fences as the control plane sees them (`control_plane.network.node`).

Each node's fence posts, once a second, its node's sandboxes (their addresses, what their
policies refused them, and which policy each holds); it is answered each one's policy, read
from its row (null for one that is not a live sandbox of this deployment: let it out). What
the fences report is kept here, in this process, for the sandbox's `refusals` and for a
policy change to return once it is in force (`until_held`). Bounded: a sandbox not reported
for a minute is forgotten, and a report names at most a thousand.

The fences authenticate with the deployment's fence token (`token`), derived from the control
plane's secret key (every control plane of the deployment has the same), handed to the fence
service as a Docker secret. It lets a fence read the policies of the sandboxes it names and
report on them, nothing else.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass

from control_plane.crypto import Cipher
from control_plane.network.fence import Refusal, Refusals
from control_plane.network.node import policy_key
from control_plane.network.policy import NetworkPolicy
from control_plane.store import Database
from control_plane.store import sandboxes as rows

#: Seconds a report holds (a fence reports every second; one silent this long is gone).
FORGET_SECONDS = 60.0


@dataclass(frozen=True)
class Reported:
    address: ipaddress.IPv4Address
    refusals: Refusals
    holds: str | None
    at: float
    runtime: str | None = None


class NodeFences:
    def __init__(self, db: Database, cipher: Cipher) -> None:
        self.db = db
        self.token = base64.urlsafe_b64encode(cipher.derive("node-fence")).decode().rstrip("=")
        self._reports: dict[str, Reported] = {}
        self._changed = asyncio.Condition()

    def authentic(self, token: str) -> bool:
        return hmac.compare_digest(token.encode(), self.token.encode())

    async def report(self, sandboxes: dict[str, Reported]) -> dict[str, NetworkPolicy | None]:
        """A fence's round: its report kept, each sandbox's policy answered."""
        now = time.monotonic()
        self._reports = {k: v for k, v in self._reports.items() if now - v.at < FORGET_SECONDS}
        policies: dict[str, NetworkPolicy | None] = {}
        found = await rows.get_many(self.db, list(sandboxes))
        for sandbox_id, reported in sandboxes.items():
            row = found.get(sandbox_id)
            live = row is not None and not row.status.terminal
            policies[sandbox_id] = row.network if row is not None and live else None
            if live:
                self._reports[sandbox_id] = reported
        async with self._changed:
            self._changed.notify_all()
        return policies

    def refusals(self, sandbox_id: str) -> Refusals | None:
        reported = self._reports.get(sandbox_id)
        return None if reported is None else reported.refusals

    async def until_held(self, sandbox_id: str, policy: NetworkPolicy, timeout: float) -> bool:
        """Whether the sandbox's fence says it holds `policy` within `timeout` seconds."""
        wanted = policy_key(policy)

        def held() -> bool:
            reported = self._reports.get(sandbox_id)
            return reported is not None and reported.holds == wanted

        return await self._until(held, timeout)

    async def until_reported(self, sandbox_id: str, timeout: float) -> Reported | None:
        """The sandbox's report once a fence held it (its policy let in), within `timeout`
        seconds; None if none did."""

        def held() -> bool:
            reported = self._reports.get(sandbox_id)
            return reported is not None and reported.holds is not None

        return self._reports.get(sandbox_id) if await self._until(held, timeout) else None

    async def _until(self, condition: Callable[[], bool], timeout: float) -> bool:
        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(condition), timeout)
        except TimeoutError:
            return False
        return True


def reported(
    address: str, refused: int, recent: list[Refusal], holds: str | None, runtime: str | None = None
) -> Reported:
    return Reported(
        ipaddress.IPv4Address(address),
        Refusals(refused, tuple(recent)),
        holds,
        time.monotonic(),
        runtime,
    )
