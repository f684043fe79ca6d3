"""The processes this control plane started itself (sandboxes' launchers), and their reaping.

A launcher spawned here is this process's child until it ends, and is reaped by its pid
(`os.waitpid`), so it never lingers as a zombie. Children are spawned without Popen objects on
purpose: a sandbox outlives the control plane (the next one adopts it), so nothing here may
own, wait for or warn about its lifetime. A sandbox adopted after a restart is no child of
this process: whether it runs is read from /proc alone (`core.processes`).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from control_plane.providers.process import cgroups
from control_plane.providers.process.isolation import Command
from control_plane.providers.process.spawn import spawn
from core import processes


class Children:
    """This process's children that are sandboxes' launchers (their pids)."""

    def __init__(self) -> None:
        self._pids: set[int] = set()

    def __contains__(self, pid: object) -> bool:
        return pid in self._pids

    def spawn(
        self, command: Command, *, output: int, stdin: bytes | int, groups: list[Path]
    ) -> int:
        """`command` in a session of its own (moved into `groups` before it runs anything):
        its pid, a child of ours from now on."""
        pid = spawn(
            cgroups.enter(groups, command.argv),
            command.env,
            output=output,
            stdin=stdin,
            files=command.files,
        )
        self._pids.add(pid)
        return pid

    def reap(self, pid: int) -> int | None:
        """The exit status of our child `pid` when it has just ended (and is reaped now)."""
        if pid not in self._pids:
            return None
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 0
        if done == 0:
            return None
        self._pids.discard(pid)
        return os.waitstatus_to_exitcode(status)

    async def kill_now(self, pid: int) -> None:
        """A start that failed or was cancelled: nothing of it is left (it dies in moments; the
        wait for it yields, so other sandboxes' work goes on meanwhile)."""
        processes.signal_group(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while pid in self._pids and time.monotonic() < deadline:
            self.reap(pid)
            await asyncio.sleep(0.005)
