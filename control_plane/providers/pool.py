"""Warm pools: a few started sandboxes that no one has yet, each handed whole to one new sandbox.

A cold container start waits for the engine to create and start a container (about 0.5 s on
Docker, more through a Swarm manager) and for the server's imports inside it (about 0.7 s of
CPU). A parked one has both behind it. It is made as a cold start makes a sandbox's (the same
image, network, hardening and limits, an empty volume of its own) for a sandbox id drawn in
advance, and its server (`python -m agent_server.warm`) has loaded everything and waits for its
keys, which no parked sandbox holds.

- **Reserve**: a new sandbox's row takes its id from a parked one when there is one
  (`SandboxProvider.reserve`), so its labels and volume are already the sandbox's.
- **Claim**: the sandbox's start hands the parked one its keys (`_hand_over`: Docker's held
  stdin, Swarm's one-time claim); the start is over when /alive answers. One whose server has
  died meanwhile is removed and the start is a cold one under the same id.
- **One sandbox each**: a parked sandbox is claimed once and never comes back; one reserved
  for a row that was never made (its transaction failed) is removed after RESERVE_TIMEOUT.
- **Never outliving its control plane**: each kind ends by itself once its control plane is
  gone (below); the pool of a control plane that starts removes what ended of its
  deployment's pools (`_sweep`).
- **Refilled in the background**, one at a time. One that cannot be parked is logged and tried
  again after BACKOFF; a start never waits for the pool.

Docker's is `docker.pool.DockerPool`, Swarm's `swarm.pool.SwarmPool`.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio

from control_plane.sandboxes.provider import Handle, Launch, ProviderError

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: Seconds a reserved sandbox waits for its start before it is removed.
RESERVE_TIMEOUT = 120.0
#: Seconds before parking is tried again after a failure (the engine away, the image missing).
BACKOFF = 10.0
#: Seconds between looks at the parked ones (and their lifelines).
CHECK_INTERVAL = 15.0


class Engine(Protocol):
    """What a pool asks of its provider."""

    plane: str

    async def run(self, fn: Callable[..., T], *args: Any) -> T: ...


@dataclass
class Parked:
    sandbox_id: str
    ref: str
    """The container's (or service's) id; empty when a park was cut short (found by name)."""
    hold: Any
    """What hands it its keys: Docker's held stdin attach, Swarm's claim token."""
    handle: Handle | None = None
    reserved_at: float | None = None


class WarmPool(abc.ABC):
    def __init__(self, provider: Engine, size: int, webhook_url: str) -> None:
        """`webhook_url`: as a sandbox sees it, the same for every sandbox of this control
        plane (a start told another one starts cold)."""
        self.provider = provider
        self.size = size
        self.webhook_url = webhook_url
        self._parked: deque[Parked] = deque()
        self._reserved: dict[str, Parked] = {}
        self._wanted = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._removals: set[asyncio.Task[None]] = set()  # held: the loop keeps weak references
        self.interval = CHECK_INTERVAL

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._fill(), name="warm pool: filling"),
            asyncio.create_task(self._watch(), name="warm pool: watching"),
        ]

    @property
    def waiting(self) -> list[str]:
        """The sandbox ids of the parked ones, the first to be handed out first."""
        return [parked.sandbox_id for parked in self._parked]

    def reserve(self) -> str | None:
        """A parked sandbox's id, taken out of the pool (None when it is empty)."""
        if not self._parked:
            return None
        parked = self._parked.popleft()
        parked.reserved_at = time.monotonic()
        self._reserved[parked.sandbox_id] = parked
        self._wanted.set()
        return parked.sandbox_id

    async def claim(self, launch: Launch, webhook_url: str) -> str | None:
        """The reserved one of `launch`'s sandbox with its keys handed over (its id), or
        None: not one of the pool's, or its server is gone (then removed)."""
        parked = self._reserved.pop(launch.sandbox_id, None)
        if parked is None:
            return None
        try:
            if webhook_url != self.webhook_url:
                raise ProviderError("it was parked for another webhook URL")
            return await self._hand_over(parked, launch.keys())
        except ProviderError as exc:
            logger.warning("warm pool: sandbox %s starts cold (%s)", launch.sandbox_id, exc)
            await self._discard(parked)
            return None

    async def close(self) -> None:
        """Parked and reserved ones removed; claimed ones are sandboxes and stay."""
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        left = [*self._parked, *self._reserved.values()]
        self._parked.clear()
        self._reserved.clear()
        for parked in left:
            await self._discard(parked)
        await asyncio.gather(*self._removals, return_exceptions=True)

    # -- in the background ------------------------------------------------------------------

    async def _fill(self) -> None:
        try:
            await self._sweep()
        except ProviderError as exc:
            logger.warning("warm pool: what earlier control planes parked is left (%s)", exc)
        while True:
            if len(self._parked) < self.size:
                sandbox_id = uuid.uuid4().hex
                try:
                    self._parked.append(await self._park(sandbox_id))
                    continue
                except asyncio.CancelledError:  # (closing) what it made goes too
                    with anyio.CancelScope(shield=True):
                        await self._discard(Parked(sandbox_id, "", None))
                    raise
                except ProviderError as exc:
                    logger.warning(
                        "warm pool: one could not be parked (%s); again in %g s", exc, BACKOFF
                    )
                    await asyncio.sleep(BACKOFF)
                    continue
                except Exception:  # never the end of the pool
                    logger.exception("warm pool: parking failed; again in %g s", BACKOFF)
                    await asyncio.sleep(BACKOFF)
                    continue
            self._wanted.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wanted.wait(), self.interval)

    async def _watch(self) -> None:
        """Every `interval`: unclaimed reservations and parked ones that died go (and the
        living get their lifeline, where they have one)."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self._look()
            except Exception:  # never the end of the pool
                logger.exception("warm pool: looking at the parked ones failed")

    async def _look(self) -> None:
        now = time.monotonic()
        for sandbox_id, parked in list(self._reserved.items()):
            if parked.reserved_at is not None and now - parked.reserved_at > RESERVE_TIMEOUT:
                del self._reserved[sandbox_id]
                self._remove(parked)
        looked = list(self._parked)  # all at once: one slow answer delays no other's lifeline
        kept = await asyncio.gather(*(self._keep(parked) for parked in looked))
        for parked, keep in zip(looked, kept, strict=True):
            if not keep and parked in self._parked:
                self._parked.remove(parked)
                self._wanted.set()
                self._remove(parked)

    def _remove(self, parked: Parked) -> None:
        """`_discard` in the background."""
        task = asyncio.create_task(self._discard(parked), name=f"remove {parked.sandbox_id}")
        self._removals.add(task)
        task.add_done_callback(self._removals.discard)

    # -- each kind's ------------------------------------------------------------------------

    @abc.abstractmethod
    async def _park(self, sandbox_id: str) -> Parked:
        """A new parked sandbox, waiting for its keys."""

    @abc.abstractmethod
    async def _hand_over(self, parked: Parked, keys: bytes) -> str:
        """Its keys handed over; its id. ProviderError when it cannot take them."""

    @abc.abstractmethod
    async def _keep(self, parked: Parked) -> bool:
        """Whether it still waits (and its lifeline, where it has one)."""

    @abc.abstractmethod
    async def _discard(self, parked: Parked) -> None:
        """It and its volume removed (it never had a key)."""

    @abc.abstractmethod
    async def _sweep(self) -> None:
        """What ended of the deployment's pools (their control planes gone) removed."""
