"""Facts about processes from /proc: is a pid still the process we started, and is it stopped."""

from __future__ import annotations

import os
import signal

from core import processes


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode(errors="replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    return [raw[: raw.index("(")].strip(), "comm", *raw[raw.rindex(")") + 2 :].split()]


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat: ticks after boot at which the process started."""
    fields = _stat(pid)
    return None if fields is None else int(fields[21])


def state(pid: int) -> str | None:
    """One letter: R, S, D, T (stopped), Z (zombie), ...; None when there is no such pid."""
    fields = _stat(pid)
    return None if fields is None else fields[2]


def is_ours(pid: int, started: int) -> bool:
    """The pid exists, is not a zombie, and started when ours did (not a reused pid)."""
    return start_time(pid) == started and state(pid) not in (None, "Z", "X")


def signal_group(pid: int, sig: signal.Signals) -> bool:
    """Signal the whole process group led by `pid`; False when it is already gone."""
    try:
        os.killpg(pid, sig)
        return True
    except ProcessLookupError:
        return False


def with_argument(argument: str) -> list[tuple[int, int]]:
    """(pid, process group) of the live processes holding `argument` as one whole argument of
    their command line: finds a sandbox whose pid was never recorded (its launcher died while
    it started). The command line, not the environment: an agent server's environment is
    readable by root alone (it is not dumpable, see agent_server.secrecy)."""
    needle = argument.encode()
    found = []
    for info in processes.list_processes():
        if not info.alive:
            continue
        try:
            with open(f"/proc/{info.pid}/cmdline", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    found.append((info.pid, info.pgid))
        except OSError:
            continue
    return found


def children(pid: int) -> list[int]:
    """Live processes whose parent is `pid`."""
    return [info.pid for info in processes.list_processes() if info.alive and info.ppid == pid]


def holds_group(pid: int, started: int) -> bool:
    """Whether the process group `pid` led is still ours to signal: its leader is ours (alive,
    or a zombie not yet collected), or the leader is gone and members are left (a group id is
    never handed to another process while the group has members)."""
    began = start_time(pid)
    if began is not None:
        return began == started
    return bool(processes.group_members(pid))
