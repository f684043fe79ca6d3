"""The end of a process sandbox's processes: every one of them, whatever session it leads.

A destroy asks the server to end (SIGTERM, after SIGCONT: a stopped group only acts on it once
continued), gives it a grace period, then kills whatever is left: the launcher's group (with
bubblewrap's pid 1, the whole pid namespace), the namespace's processes, and what they started
in sessions of their own (the terminal's shells), which nothing links to the server once it
is gone, so they are listed while it lives and swept again by the sandbox's environment
marker at the end. The launcher, a child of this process, is reaped, so no zombie is left.
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
        # Taken while the server lives: its shells run in sessions of their own, and once
        # it is gone nothing links them to it any more.
        tree = (
            await asyncio.to_thread(_sweep, processes.started_by, leader, ready_marker(root_dir))
            or set()
        )
        # Isolated, bubblewrap (the leader, which SIGTERM ends at once, and its pid 1,
        # which waits for everything of the sandbox) is not what is waited for: the server
        # has stopped when nothing else of the group is left.
        launcher = {leader, *processes.children(leader)} if self.isolation is not None else set()
        # A stopped group only acts on SIGTERM once continued.
        inside = self.signals.namespace(handle)
        if self.isolation is not None and self.isolation.own_kernel:
            # On a kernel of its own the launcher (runsc) and its children are all there
            # is of it on this host, and they are waited for; its sandbox process leads a
            # session of its own, so it is killed by name at the end.
            tree |= set(processes.children(leader))
            launcher = set()
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
        for pid in tree:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        await asyncio.to_thread(_sweep, processes.kill_tree, leader, ready_marker(root_dir))
        for _ in range(500):  # no zombie left behind: SIGKILL takes a moment to land
            self.children.reap(leader)
            if leader not in self.children:
                break
            await asyncio.sleep(0.01)


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
