"""Warm pools: a few started sandboxes that no one has yet, each handed whole to one new sandbox.

A cold container start waits for the engine to create and start a container (about 0.5 s on
Docker, more through a Swarm manager) and for the server's imports inside it (about 0.7 s of
CPU). A parked one has both behind it. It is made as a cold start makes a sandbox's (the same
image, network, hardening and limits, an empty volume of its own) for a sandbox id drawn in
advance, and its server (`python -m agent_server.warm`) has loaded everything and waits for its
keys, which no parked sandbox holds.

- **Reserve**: a new sandbox's row takes its id from a parked one when there is one
  (`SandboxProvider.reserve`), so its labels and volume are already the sandbox's.
- **Claim**: the sandbox's start hands the parked one its keys (`Parking.hand_over`: Docker's
  held stdin, Swarm's one-time claim); the start is over when /alive answers. One whose server
  has died meanwhile is removed and the start is a cold one under the same id.
- **One sandbox each**: a parked sandbox is claimed once and never comes back; one reserved
  for a row that was never made (its transaction failed) is removed after RESERVE_TIMEOUT.
- **Never outliving its control plane**: each kind ends by itself once its control plane is
  gone (its parking says how); the pool of a control plane that starts removes what ended of
  its deployment's pools (`Parking.sweep`).
- **Refilled in the background**, one at a time, once starts are quiet: none under way, and
  REFILL_PAUSE since the last was over (a park's work would slow those starts, whose tasks go
  on to make their conversations; in a burst, every start would share the cores with parks),
  or after PATIENCE of a steady stream of them. One that cannot be parked is logged and tried
  again after BACKOFF; a start never waits for the pool.

The pool wraps its provider (`Pooled`): the provider offers the moves (`parking.Parking`:
Docker's are `docker.pool`'s, Swarm's `swarm.pool`'s) and never holds its pool; the composition
root puts a provider in a pool when the deployment asks for one (`services.build_provider`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Iterator
from typing import Any

import anyio

from control_plane.providers.parking import Parked, Parking
from control_plane.sandboxes.provider import (
    Handle,
    Launch,
    ProviderError,
)
from control_plane.sandboxes.wrapper import Wrapper

logger = logging.getLogger(__name__)

#: Seconds a reserved sandbox waits for its start before it is removed.
RESERVE_TIMEOUT = 120.0
#: Seconds before parking is tried again after a failure (the engine away, the image missing).
BACKOFF = 10.0
#: Seconds between the end of the last start and a refill: that start's task goes on (its
#: conversation made in the sandbox), and a refill's work on the same cores (a container made
#: and started, a server loading everything) slowed it: Docker, a pool of one at load 1 to 2,
#: 0.07-0.09 s from the provider's return to READY, 0.04-0.055 s with the pause. Each start puts
#: the refill off again, so a burst of starts has the cores.
REFILL_PAUSE = 1.0
#: Seconds a pool short of parked ones waits for starts to be quiet, at most: starts that never
#: leave REFILL_PAUSE between them are a steady stream, not a burst, and would otherwise keep
#: the pool empty and every start cold; past this, it refills beside them.
PATIENCE = 30.0


class WarmPool:
    """The books of one provider's parked sandboxes: those waiting, those reserved for a new
    row, the refill and the looks at them in the background."""

    def __init__(self, parking: Parking[Any], size: int, webhook_url: str) -> None:
        """`webhook_url`: as a sandbox sees it, the same for every sandbox of this control
        plane (a start told another one starts cold)."""
        self.parking = parking
        self.size = size
        self.webhook_url = webhook_url
        self._parked: deque[Parked] = deque()
        self._reserved: dict[str, Parked] = {}
        self._wanted = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._removals: set[asyncio.Task[None]] = set()  # held: the loop keeps weak references
        self._refill: asyncio.TimerHandle | None = None
        self._starts = 0  # under way (`starting`)
        self._taken_at = -REFILL_PAUSE  # when a start last asked for one or ended
        self._put_off: float | None = None  # since when the pool, short, has waited for starts
        self.interval = parking.keep_interval
        self.hits = 0
        """New sandboxes that were handed a parked one (read by the metrics' scrape)."""
        self.misses = 0
        """New sandboxes that asked and started cold (the pool empty, or a parked one dead);
        a resumed or restarted sandbox never asks."""

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
        """A parked sandbox's id, taken out of the pool (None when it is empty: the start is
        a cold one, and puts the refill off as well)."""
        self._taken_at = time.monotonic()
        if not self._parked:
            self.misses += 1
            return None
        parked = self._parked.popleft()
        parked.reserved_at = self._taken_at
        self._reserved[parked.sandbox_id] = parked
        return parked.sandbox_id  # refilled once the starts are over (`starting`)

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        """A start under way (a claim or a cold one): no park begins until it and every other
        start are over, and REFILL_PAUSE after the last, so a park's work (a container made, a
        server forked) slows neither that start, whose task goes on to make its conversation,
        nor the next ones of a burst. Then the pool refills what was taken."""
        self._starts += 1
        try:
            yield
        finally:
            self._starts -= 1
            self._taken_at = time.monotonic()
            if self._refill is not None:
                self._refill.cancel()
            self._refill = asyncio.get_running_loop().call_later(REFILL_PAUSE, self._refilled)

    def _refilled(self) -> None:
        self._refill = None
        self._wanted.set()

    def _may_park(self) -> bool:
        """The pool is short, and starts are quiet (none under way or holding a reserved one,
        none begun or ended for REFILL_PAUSE: a park now slows no start) or have kept it
        waiting PATIENCE."""
        now = time.monotonic()
        if len(self._parked) >= self.size or (
            not self._starts and not self._reserved and now - self._taken_at >= REFILL_PAUSE
        ):
            self._put_off = None
            return len(self._parked) < self.size
        if self._put_off is None:
            self._put_off = now
        return now - self._put_off >= PATIENCE

    async def claim(self, launch: Launch, webhook_url: str) -> Any | None:
        """The reserved one of `launch`'s sandbox with its keys handed over (what the
        provider's wait is given), or None: not one of the pool's, or its server is gone (then
        removed)."""
        parked = self._reserved.pop(launch.sandbox_id, None)
        if parked is None:
            return None
        try:
            if webhook_url != self.webhook_url:
                raise ProviderError("it was parked for another webhook URL")
            started = await self.parking.hand_over(parked, launch.keys())
        except ProviderError as exc:
            logger.warning("warm pool: sandbox %s starts cold (%s)", launch.sandbox_id, exc)
            self.misses += 1
            await self.parking.discard(parked)
            return None
        self.hits += 1
        return started

    async def close(self) -> None:
        """Parked and reserved ones removed; claimed ones are sandboxes and stay."""
        if self._refill is not None:
            self._refill.cancel()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        left = [*self._parked, *self._reserved.values()]
        self._parked.clear()
        self._reserved.clear()
        for parked in left:
            await self.parking.discard(parked)
        await asyncio.gather(*self._removals, return_exceptions=True)

    # -- in the background ------------------------------------------------------------------

    async def _fill(self) -> None:
        try:
            await self.parking.sweep()
        except ProviderError as exc:
            logger.warning("warm pool: what earlier control planes parked is left (%s)", exc)
        while True:
            if self._may_park():
                sandbox_id = uuid.uuid4().hex
                # Shielded: a park cut short in its worker thread would still finish there,
                # and what it made (a held attach, a keys' pipe) would be lost unclosed.
                parking = asyncio.ensure_future(self.parking.park(sandbox_id, self.webhook_url))
                try:
                    self._parked.append(await asyncio.shield(parking))
                    continue
                except asyncio.CancelledError:  # (closing) what it made goes too, once made
                    with anyio.CancelScope(shield=True):
                        made = await _outcome(parking)
                        await self.parking.discard(made or Parked(sandbox_id, "", None))
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
                self._wanted.set()
        looked = list(self._parked)  # all at once: one slow answer delays no other's lifeline
        kept = await asyncio.gather(*(self.parking.keep(parked) for parked in looked))
        for parked, keep in zip(looked, kept, strict=True):
            if not keep and parked in self._parked:
                self._parked.remove(parked)
                self._wanted.set()
                self._remove(parked)

    def _remove(self, parked: Parked) -> None:
        """`Parking.discard` in the background."""
        task = asyncio.create_task(self.parking.discard(parked), name=f"remove {parked.sandbox_id}")
        self._removals.add(task)
        task.add_done_callback(self._removals.discard)


async def _outcome(parking: asyncio.Future[Parked]) -> Parked | None:
    """The park's result once it has ended (None: it failed)."""
    try:
        return await parking
    except Exception:
        return None


class Pooled(Wrapper):
    """A provider behind a warm pool of `size`: a new sandbox's row takes a parked one's id
    (`reserve`) and its start claims it (`create`), else the provider starts it cold. Everything
    else is the provider's, asked of it as it is; the pool is started after it and closed
    before it.

    It keeps nothing but the pool: every other seam method is the wrapped provider's, so a
    sandbox is the same sandbox whether a pool made it or not, and a control plane without a
    pool adopts it."""

    def __init__(self, provider: Parking[Any], size: int, webhook_url: str) -> None:
        """`webhook_url`: this control plane's, as every sandbox of it is told (the provider
        says how a sandbox reaches it: `inside`); parked servers are given it before they
        know their sandbox."""
        super().__init__(provider)
        self.provider: Parking[Any] = provider
        self.pool = WarmPool(provider, size, provider.inside(webhook_url))

    # -- through the pool ---------------------------------------------------------------------

    async def start(self) -> None:
        await self.provider.start()
        self.pool.start()

    def reserve(self, spec_id: str) -> str | None:
        return self.pool.reserve() if spec_id == self.provider.spec.id else None

    async def create(self, launch: Launch) -> Handle:
        """The parked sandbox reserved for it, handed its keys, else a cold start; either way
        the provider's wait (and its removal when the sandbox does not come up)."""
        with self.pool.starting():
            await self.provider.prepare(launch)
            started = await self.pool.claim(launch, self.provider.inside(launch.webhook_url))
            if started is None:
                started = await self.provider.start_cold(launch)
            return await self.provider.until_started(launch, started)

    async def close(self) -> None:
        await self.pool.close()
        await self.provider.close()
