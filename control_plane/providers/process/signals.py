"""Pause and resume of a process sandbox: SIGSTOP and SIGCONT to everything of it.

A sandbox is more than its launcher's process group: a server forked from the template leads
a session of its own, and the shells its terminal starts do too. So the signals go to the
group and to every other process of the sandbox, found the cheapest way there is:

- its own cgroup v2 group (`cgroups.Leaf`, as a stop finds it), which the kernel keeps:
  every process of the sandbox is in it, whatever its session or parent (one the agent
  orphaned in a session of its own with a clean environment too). A few small files;
- without one (no cgroups, v1 only, a kernel before 5.14), an isolated sandbox's pid
  namespace: what runs in it is the sandbox's, whatever its group. Finding it reads every
  process of the host from /proc (a tenth of a second with thousands), and so does listing
  its members. Without isolation and without the group, only the launcher's group is
  signalled: nothing else of /proc tells the sandbox's processes apart.

Either way they are signalled in the order of their pids, as /proc lists them, after the
group. On a kernel of its own (gVisor's) nothing of the sandbox is a process of this host:
its isolation stops and continues it, and the launcher's group is signalled too (alone: runsc's
own processes are left to runsc), which is how a paused sandbox is known again. The namespace
found here is also what a destroy signals where it reads /proc (`stop`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable

from control_plane.providers.process import cgroups
from control_plane.providers.process.isolation import Isolation
from control_plane.providers.process.leader import Leader
from control_plane.sandboxes.provider import Handle, ProviderError
from core import namespaces, processes

#: The sandbox's processes besides its launcher's group, listed anew at each call (host pids).
Members = Callable[[], list[int]]


class Signals:
    """The signals a sandbox's processes are sent, under its isolation (None: none)."""

    def __init__(self, isolation: Isolation | None) -> None:
        self.isolation = isolation

    async def pause(self, handle: Handle) -> None:
        """Returns once the server is stopped, and every other process of the sandbox (one
        forked meanwhile is stopped then): a signal lands asynchronously, and PAUSED is only
        stored when it is true. A kernel of its own (gVisor's) stops the sandbox first; the
        launcher's group is stopped too, which is how a paused sandbox is known again."""
        leader = Leader.of(handle)
        if self.isolation is not None:
            await self.isolation.pause(leader.pid)
        members = self.members(handle)
        self.send(handle, signal.SIGSTOP, members)
        deadline = time.monotonic() + 5
        while processes.state(leader.pid) != "T" or _running(members):
            if time.monotonic() > deadline or not leader.running():
                raise ProviderError("the agent server did not stop")
            await asyncio.sleep(0.005)

    async def resume(self, handle: Handle) -> None:
        """Continues everything of the sandbox (the wait for its server to answer again is the
        provider's)."""
        self.send(handle, signal.SIGCONT)
        if self.isolation is not None:
            await self.isolation.resume(Leader.of(handle).pid)

    def send(self, handle: Handle, sig: signal.Signals, members: Members | None = None) -> None:
        """`sig` to the launcher's group, then to the sandbox's other processes (`members`,
        else found here); ProviderError when its process is gone."""
        leader = Leader.of(handle)
        if not leader.running() or not processes.signal_group(leader.pid, sig):
            raise ProviderError("the sandbox's process is gone")
        if members is None:
            members = self.members(handle)
        if members is not None:
            _signal(members(), sig)

    def members(self, handle: Handle) -> Members | None:
        """How the sandbox's processes beyond its launcher's group are listed: from its cgroup
        v2 group where it has one, else from its pid namespace (/proc). None where nothing
        is: on a kernel of its own, or without isolation and without the group."""
        if self.isolation is not None and self.isolation.own_kernel:
            return None
        leaf = cgroups.leaf_of(Leader.of(handle).pid, handle.sandbox_id)
        if leaf is not None:
            return lambda: sorted(leaf.pids())
        if (inside := self.namespace(handle)) is not None:
            return lambda: namespaces.members(inside)
        return None

    def namespace(self, handle: Handle) -> str | None:
        """An isolated sandbox's pid namespace: what runs in it is the sandbox's, whatever its
        group (a server forked from the template leads a session of its own). None on a
        kernel of its own: nothing of the sandbox is a process of this host. Reads /proc."""
        if self.isolation is None or self.isolation.own_kernel:
            return None
        ours = namespaces.namespace(os.getpid())
        for pid in processes.group_members(Leader.of(handle).pid):
            if (inside := namespaces.namespace(pid)) not in (None, ours):
                return inside
        return None


def _running(members: Members | None) -> bool:
    """Some process of the sandbox is not stopped yet (one forked meanwhile is stopped now)."""
    if members is None:
        return False
    running = [p for p in members() if processes.state(p) not in ("T", "t", "Z", None)]
    _signal(running, signal.SIGSTOP)
    return bool(running)


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
