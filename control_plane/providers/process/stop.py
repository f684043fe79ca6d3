"""The end of a process sandbox's processes: every one of them, whatever session it leads.

A destroy asks the server to end (SIGTERM, after SIGCONT: a stopped group only acts on it once
continued), gives it a grace period, then kills whatever is left: the launcher's group (with
bubblewrap's pid 1, the whole pid namespace), the namespace's processes, and what they started
in sessions of their own (the terminal's shells). The launcher, a child of this process, is
reaped, so no zombie is left.

Where the sandbox has a cgroup v2 group of its own (`cgroups.Leaf`: its limits' group under
cgroup v2, or its leaf in the hybrid layout's v2 hierarchy), the kernel names all of that: a
child is born in its parent's group whatever session it makes, and only root moves it out.
Its members are signalled as the namespace's are, the grace period watches the group's members
(a few small files) and the kernel kills it whole (`cgroup.kill`), with whatever forks
meanwhile. Elsewhere (no cgroups, v1 only, a kernel before 5.14) /proc is read instead: the
shells in sessions of their own, which nothing links to the server once it is gone, are listed
while it lives and swept again by the sandbox's environment marker at the end (which the
commands the server runs do not carry: core withholds the server's variables from them, so
one orphaned in a session of its own before the stop is missed that way). Each read of /proc
reads every process of the host (a tenth of a second with thousands).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from control_plane.providers.process import cgroups
from control_plane.providers.process.children import Children
from control_plane.providers.process.environment import ready_marker
from control_plane.providers.process.isolation import Isolation
from control_plane.providers.process.leader import Leader
from control_plane.providers.process.signals import Signals
from control_plane.sandboxes.provider import Handle
from core import namespaces, processes

logger = logging.getLogger(__name__)
T = TypeVar("T")


class Stopper:
    """Ends sandboxes' processes for good, `grace` seconds after asking them to."""

    def __init__(
        self, isolation: Isolation | None, signals: Signals, children: Children, grace: float
    ) -> None:
        self.isolation = isolation
        self.signals = signals
        self.children = children
        self.grace = grace

    async def stop(self, handle: Handle, root_dir: Path) -> None:
        """Nothing of the sandbox whose launcher `handle` names (a group still ours) is left
        running once this returns."""
        leader = Leader.of(handle).pid
        leaf = cgroups.leaf_of(leader, handle.sandbox_id)
        if leaf is None or not await self._held(leader, leaf):
            await self._scanned(handle, leader, root_dir)
        for _ in range(500):  # no zombie left behind: SIGKILL takes a moment to land
            self.children.reap(leader)
            if leader not in self.children:
                break
            await asyncio.sleep(0.01)

    def _launcher(self, leader: int) -> set[int]:
        """What of the group is not waited for. Isolated, bubblewrap (the leader, which
        SIGTERM ends at once, and its pid 1, which waits for everything of the sandbox): the
        server has stopped when nothing else of the group is left. On a kernel of its own the
        launcher (runsc) and its children are all there is of it on this host, and they are
        waited for."""
        if self.isolation is None or self.isolation.own_kernel:
            return set()
        return {leader, *processes.children(leader)}

    async def _held(self, leader: int, leaf: cgroups.Leaf) -> bool:
        """The sandbox ended through its own cgroup (`leaf`), which holds every process of
        it (the terminal's shells in their sessions, runsc's sandbox); no /proc scan. False
        when the kernel refused to kill it: the caller sweeps /proc then."""
        launcher = self._launcher(leader)
        # Isolated (not on a kernel of its own), its processes are its pid namespace's and its
        # launcher's: signalled as the namespace is on the way below.
        inside = self.isolation is not None and not self.isolation.own_kernel
        processes.signal_group(leader, signal.SIGCONT)
        if self.isolation is None or not self.isolation.own_kernel:
            # Continued, every one (a pause stops them all): a stopped command would not
            # act on the server's SIGTERM, and would be killed only at the grace's end.
            _signal(leaf.pids(), signal.SIGCONT)
        if self.isolation is None or not await self.isolation.terminate(leader):
            processes.signal_group(leader, signal.SIGTERM)
            if inside:
                _signal(leaf.pids(), signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline:
            self.children.reap(leader)
            if not leaf.populated() or not _in_group(leaf.pids(), leader) - launcher:
                break
            await asyncio.sleep(0.02)
        processes.signal_group(leader, signal.SIGKILL)
        if not leaf.kill():
            return False
        for _ in range(500):  # SIGKILL takes a moment to land
            if not leaf.populated():
                return True
            await asyncio.sleep(0.01)
        logger.warning("processes of sandbox process %d outlived SIGKILL", leader)
        return True

    async def _scanned(self, handle: Handle, leader: int, root_dir: Path) -> None:
        """The sandbox ended with what /proc says of its processes: where it has no cgroup v2
        group of its own (no cgroups, v1 only) or the kernel no `cgroup.kill`."""
        # Taken while the server lives: its shells run in sessions of their own, and once
        # it is gone nothing links them to it any more.
        tree = (
            await asyncio.to_thread(_sweep, processes.started_by, leader, ready_marker(root_dir))
            or set()
        )
        launcher = self._launcher(leader)
        # A stopped group only acts on SIGTERM once continued.
        inside = self.signals.namespace(handle)
        if self.isolation is not None and self.isolation.own_kernel:
            # Its sandbox process leads a session of its own: it is killed by name at the end.
            tree |= set(processes.children(leader))
        processes.signal_group(leader, signal.SIGCONT)
        if inside is not None:
            namespaces.signal_all(inside, signal.SIGCONT)
        if self.isolation is None or not await self.isolation.terminate(leader):
            processes.signal_group(leader, signal.SIGTERM)
            if inside is not None:
                namespaces.signal_all(inside, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline:
            self.children.reap(leader)
            if not set(processes.group_members(leader)) - launcher:
                break
            await asyncio.sleep(0.02)
        # Whatever is left goes now: the group (with bubblewrap's pid 1, the whole pid
        # namespace), and what its processes started in sessions of their own (the
        # terminal's shells), found by core's /proc sweep.
        processes.signal_group(leader, signal.SIGKILL)
        if inside is not None:
            namespaces.signal_all(inside, signal.SIGKILL)
        _signal(tree, signal.SIGKILL)
        await asyncio.to_thread(_sweep, processes.kill_tree, leader, ready_marker(root_dir))


def _signal(pids: set[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _in_group(pids: set[int], pgid: int) -> set[int]:
    """Those of `pids` alive in process group `pgid` (each one's stat read, not all of /proc)."""
    return {
        pid
        for pid in pids
        if (info := processes.process_info(pid)) is not None and info.alive and info.pgid == pgid
    }


def _sweep(scan: Callable[[int, bytes], T], leader: int, tag: bytes) -> T | None:
    """core's /proc scans, tried again when a process ending mid-read trips them (a stat file
    read empty raises ValueError there)."""
    for _ in range(3):
        try:
            return scan(leader, tag)
        except ValueError:
            continue
    logger.warning("could not sweep the processes of sandbox process %d", leader)
    return None
