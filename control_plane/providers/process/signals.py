"""Pause and resume of a process sandbox: SIGSTOP and SIGCONT to everything of it.

A sandbox is more than its launcher's process group: a server forked from the template leads
a session of its own, and the shells its terminal starts do too. What runs in an isolated
sandbox's pid namespace is the sandbox's, whatever its group, so the signals go to the group
and to every process of that namespace. On a kernel of its own (gVisor's) nothing of the
sandbox is a process of this host: its isolation stops and continues it, and the launcher's
group is signalled too, which is how a paused sandbox is known again. The namespace found
here is also what a destroy signals (`stop`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

from control_plane.providers.process.isolation import Isolation
from control_plane.providers.process.leader import Leader
from control_plane.sandboxes.provider import Handle, ProviderError
from core import namespaces, processes


class Signals:
    """The signals a sandbox's processes are sent, under its isolation (None: none)."""

    def __init__(self, isolation: Isolation | None) -> None:
        self.isolation = isolation

    async def pause(self, handle: Handle) -> None:
        """Returns once the server is stopped: a signal lands asynchronously, and PAUSED is
        only stored when it is true. A kernel of its own (gVisor's) stops the sandbox first;
        the launcher's group is stopped too, which is how a paused sandbox is known again."""
        leader = Leader.of(handle)
        if self.isolation is not None:
            await self.isolation.pause(leader.pid)
        self.send(handle, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while processes.state(leader.pid) != "T" or self._running_inside(handle):
            if time.monotonic() > deadline or not leader.running():
                raise ProviderError("the agent server did not stop")
            await asyncio.sleep(0.005)

    async def resume(self, handle: Handle) -> None:
        """Continues everything of the sandbox (the wait for its server to answer again is the
        provider's)."""
        self.send(handle, signal.SIGCONT)
        if self.isolation is not None:
            await self.isolation.resume(Leader.of(handle).pid)

    def send(self, handle: Handle, sig: signal.Signals) -> None:
        """`sig` to the launcher's group and the sandbox's pid namespace; ProviderError when
        its process is gone."""
        leader = Leader.of(handle)
        if not leader.running() or not processes.signal_group(leader.pid, sig):
            raise ProviderError("the sandbox's process is gone")
        if (inside := self.namespace(handle)) is not None:
            namespaces.signal_all(inside, sig)

    def namespace(self, handle: Handle) -> str | None:
        """An isolated sandbox's pid namespace: what runs in it is the sandbox's, whatever its
        group (a server forked from the template leads a session of its own). None on a
        kernel of its own: nothing of the sandbox is a process of this host."""
        if self.isolation is None or self.isolation.own_kernel:
            return None
        ours = namespaces.namespace(os.getpid())
        for pid in processes.group_members(Leader.of(handle).pid):
            if (inside := namespaces.namespace(pid)) not in (None, ours):
                return inside
        return None

    def _running_inside(self, handle: Handle) -> bool:
        """Some process of the sandbox is not stopped yet (one forked meanwhile is stopped now)."""
        if (inside := self.namespace(handle)) is None:
            return False
        running = [
            p for p in namespaces.members(inside) if processes.state(p) not in ("T", "t", "Z", None)
        ]
        for pid in running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        return bool(running)
