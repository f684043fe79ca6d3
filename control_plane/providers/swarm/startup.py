"""A Swarm sandbox's service coming up: the one wait of its create, its adoption and its resume.

Swarm gives no single signal that a sandbox is up, so the wait asks, every tenth of a second,
in this order:
- the scheduler: has a node taken the service's task within `placement_timeout` (else the
  start fails with the scheduler's reason, the constraints and the reservations that left no
  node), and has the task not ended (else it fails with the task's end and the service's log);
- the task: does it run, and is the agent server's port published on its node (its handle is
  that node's address and that port);
- the agent server: does `/alive` answer there;
- on gVisor, the node's fence: does it hold the sandbox and say it runs on runsc
  (`fence.SwarmFence.check_runtime`: a node left on runc, or without a fence, ends the start).

Its loop is `sandboxes.provider.until_up`, every kind's; this is only Swarm's look. The
provider holds one and hands it what it asks of a provider (`Reach`), so neither imports the
other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from control_plane.providers.swarm.fence import SwarmFence
from control_plane.providers.swarm.manager import current, service_logs
from control_plane.providers.swarm.nodejobs import ENDED, describe
from control_plane.providers.swarm.settings import SwarmSettings
from control_plane.providers.swarm.spec import UNPLACED, published
from control_plane.sandboxes.provider import Handle, ProviderError, until_up

T = TypeVar("T")


class Reach(Protocol):
    """What the wait asks of its provider: a call on the manager (in a worker thread, its
    errors as ProviderErrors), and whether an agent server answers /alive."""

    async def run(self, fn: Callable[..., T], *args: Any) -> T: ...

    async def alive(self, handle: Handle) -> bool: ...


class Startup:
    """The wait for a sandbox's service of one provider, with its settings and its nodes'
    fences (None: the nodes' bridges alone, and no runtime to check)."""

    def __init__(self, reach: Reach, settings: SwarmSettings, fence: SwarmFence | None) -> None:
        self.reach = reach
        self.settings = settings
        self.fence = fence

    async def until_up(
        self, sandbox_id: str, service_id: str, earlier: frozenset[str] = frozenset()
    ) -> Handle:
        """Until its task runs and /alive answers; ProviderError when no node takes it within
        `placement_timeout` seconds, when the task ends, or when the start timeout is up.
        `earlier`: the ids of tasks that ended before (a paused sandbox's), not the one waited
        for."""
        settings = self.settings
        placement = settings.placement_timeout
        began = time.monotonic()
        state = "new"

        async def look() -> Handle | None:
            nonlocal state
            task, node = await self.reach.run(current, service_id, earlier)
            state = "new" if task is None else str(task["Status"]["State"])
            if task is not None and state in ENDED:
                logs = await self.reach.run(service_logs, service_id)
                raise ProviderError(f"the agent server's task ended ({describe(task)}): {logs}")
            if state in UNPLACED and time.monotonic() > began + placement:
                reason = (task or {}).get("Status", {}).get("Err") or "no node took it"
                raise ProviderError(
                    f"no node can take the sandbox within {placement:g} s: "
                    f"{reason} (placement constraints {list(settings.constraints)}, "
                    f"reservations {settings.cpu_reservation:g} CPUs, "
                    f"{settings.memory_reservation} bytes)"
                )
            if task is None or state != "running" or node is None:
                return None
            port = published(task)
            if port is None:
                raise ProviderError("the agent server's port was not published")
            handle = Handle(sandbox_id=sandbox_id, ref=service_id, port=port, host=node.address)
            if not await self.reach.alive(handle):
                return None
            if self.fence is not None:  # on gVisor: on runsc, its node's fence says
                await self.fence.check_runtime(sandbox_id)
            return handle

        return await until_up(
            look,
            within=placement + settings.start_timeout,
            interval=0.1,
            late=lambda: (
                f"the agent server did not answer /alive within "
                f"{settings.start_timeout:g} s (its task is {state})"
            ),
        )
