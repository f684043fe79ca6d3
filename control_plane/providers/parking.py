"""Parking: what a provider offers so that a warm pool (`pool.Pooled`) can wrap it.

A parked sandbox is started ahead of the sandbox it will be, for a sandbox id drawn in advance,
and waits for its keys; the pool keeps the books (which are waiting, which are reserved for a
new row, the refill, the looks at the parked ones) and the provider makes each move on its
platform: `park`, `hand_over`, `keep`, `discard` and `sweep`. The provider never holds its
pool and the pool never reaches into the provider beyond these: the pool wraps the provider,
not the other way round.

A start is three steps, so that the pool's claim can stand between the first and the last:
`prepare` (what every start needs first: its spec checked, the platform ready), then either a
parked sandbox handed its keys or `start_cold`, then `until_started` (the one wait until it
answers, and its removal when it does not). A provider alone runs the three in a row
(`Parking.create`). What the middle step gives the last is the kind's own (`Started`): a
container's id, or a process sandbox's server and the pipe it says it is ready on.

The container kinds are such providers (`containers.ContainerProvider`): Docker's parking is
`docker.pool`, Swarm's `swarm.pool`. The process kind's is `process.parking`: servers forked
from the template into sandboxes of their own, waiting for their keys on a pipe.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from control_plane.sandboxes.provider import Handle, Launch, SandboxProvider, SandboxSpec

#: Seconds between a pool's looks at its parked ones (and their lifelines), by default.
CHECK_INTERVAL = 15.0

Started = TypeVar("Started")
"""What a start's middle step gives its wait: the kind's own."""


@dataclass
class Parked:
    """One parked sandbox, as its provider made it and the pool keeps it."""

    sandbox_id: str
    ref: str
    """The container's (or service's) id, or the process sandbox's leader; empty when a park
    was cut short (found by name)."""
    hold: Any
    """What hands it its keys: Docker's held stdin attach, Swarm's claim token, a process
    sandbox's keys' pipe."""
    handle: Handle | None = None
    reserved_at: float | None = None
    """When a new sandbox's row took its id (`time.monotonic`); None while it waits."""


class Parking(SandboxProvider, Generic[Started]):
    """A provider whose sandboxes can be parked: started before they are asked for, handed
    their keys by the start of the sandbox that takes one."""

    spec: SandboxSpec
    """The one spec its sandboxes are made from, parked ones too (a pool serves it alone)."""

    async def create(self, launch: Launch) -> Handle:
        """A cold start: the three steps in a row."""
        await self.prepare(launch)
        return await self.until_started(launch, await self.start_cold(launch))

    @property
    def keep_interval(self) -> float:
        """Seconds between the pool's looks at its parked ones (`keep`): a lifeline's beat,
        where they have one."""
        return CHECK_INTERVAL

    # -- a start, in three steps ----------------------------------------------------------------

    @abc.abstractmethod
    async def prepare(self, launch: Launch) -> None:
        """What a start needs before anything is started or claimed for it (its spec checked,
        the platform ready); ProviderError when it cannot be had."""

    @abc.abstractmethod
    async def start_cold(self, launch: Launch) -> Started:
        """A new agent server for the sandbox, started with its keys (a container's: its id).
        What a start cut short earlier left is replaced."""

    @abc.abstractmethod
    async def until_started(self, launch: Launch, started: Started) -> Handle:
        """Once the started one (cold, or parked and claimed) answers, its handle; when it
        does not, or the wait is cancelled, it is removed and nothing of it is left running."""

    # -- parking --------------------------------------------------------------------------------

    @abc.abstractmethod
    async def park(self, sandbox_id: str, webhook_url: str) -> Parked:
        """A new parked sandbox, waiting for its keys; `webhook_url` as a sandbox reaches it."""

    @abc.abstractmethod
    async def hand_over(self, parked: Parked, keys: bytes) -> Started:
        """Its keys handed over. ProviderError when it cannot take them."""

    @abc.abstractmethod
    async def keep(self, parked: Parked) -> bool:
        """Whether it still waits (and its lifeline, where it has one)."""

    @abc.abstractmethod
    async def discard(self, parked: Parked) -> None:
        """It and its volume removed (it never had a key)."""

    @abc.abstractmethod
    async def sweep(self) -> None:
        """What ended of the deployment's pools (their control planes gone) removed."""
