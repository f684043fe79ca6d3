"""What /proc says of processes: who they are, where they belong, what they carry.

Starting and ending processes (`core.processes`) needs to know which processes are there:
the members of a group, the children of a launcher, everything a run started (its session,
its descendants, those carrying its tag), whether a recorded pid is still the process it
was. Those questions are answered here, and only by reading: nothing in this module starts
or signals a process. It reads /proc directly (no psutil): this is Linux-only, as the
servers are. A process may end while it is being read; every reader treats that as the
process not being there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessInfo:
    """One line of /proc/<pid>/stat, the fields that say where a process belongs."""

    pid: int
    state: str
    """One letter: R, S, D, T (stopped), Z (zombie), ..."""
    ppid: int
    pgid: int
    session: int
    start_time: int | None = None
    """Field 22: clock ticks after boot at which it started (with the pid, it names a process
    for good: a pid is reused, a pid and its start time never are); None in a line cut short."""

    @property
    def alive(self) -> bool:
        """False for a zombie: dead, only waiting for its parent to collect it."""
        return self.state not in ("Z", "X")


# -- one process -----------------------------------------------------------------------------


def parse_stat(pid: int, stat: bytes) -> ProcessInfo | None:
    """A /proc/PID/stat line; None when it is empty or cut short (the process ended while it
    was read). The command name (in parentheses) may hold spaces and parentheses: the fields
    are split after its last parenthesis."""
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 4:
        return None
    state, ppid, pgid, session = fields[:4]
    started = int(fields[19]) if len(fields) > 19 else None  # field 22; the list starts at 3
    return ProcessInfo(pid, state.decode(), int(ppid), int(pgid), int(session), started)


def process_info(pid: int) -> ProcessInfo | None:
    """The process `pid` now; None when there is none."""
    try:
        return parse_stat(pid, Path(f"/proc/{pid}/stat").read_bytes())
    except OSError:
        return None


def state(pid: int) -> str | None:
    """Its state letter (T: stopped, Z: a zombie); None when there is no such pid."""
    info = process_info(pid)
    return None if info is None else info.state


def start_time(pid: int) -> int | None:
    """When it started (`ProcessInfo.start_time`); None when there is no such pid."""
    info = process_info(pid)
    return None if info is None else info.start_time


def is_running(pid: int, started: int) -> bool:
    """The process that started at `started` still has this pid and is not a zombie (not a
    reused pid: a process started and recorded earlier, found again after a restart)."""
    info = process_info(pid)
    return info is not None and info.alive and info.start_time == started


# -- finding processes -----------------------------------------------------------------------


def list_processes() -> list[ProcessInfo]:
    """Every process /proc shows now; one that ends while being read is left out."""
    found = []
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_bytes()
            except OSError:
                continue
            info = parse_stat(int(entry.name), stat)
            if info is not None:
                found.append(info)
    return found


def with_argument(argument: str) -> list[ProcessInfo]:
    """The live processes holding `argument` as one whole argument of their command line (the
    command line, not the environment: a server that is not dumpable has an environment only
    root reads)."""
    needle = argument.encode()
    found = []
    for info in list_processes():
        if not info.alive:
            continue
        try:
            cmdline = Path(f"/proc/{info.pid}/cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline.split(b"\0"):
            found.append(info)
    return found


def find_process(argument: str) -> int | None:
    """The process with `argument` as one whole argument of its command line."""
    found = with_argument(argument)
    return found[0].pid if found else None


def with_environment(entry: bytes) -> list[int]:
    """Processes whose environment holds exactly `entry` (NAME=value): finds those whose pid
    was never recorded (their parent died while they started)."""
    found = []
    with os.scandir("/proc") as entries:
        for item in entries:
            if item.name.isdigit() and _carries(int(item.name), entry):
                found.append(int(item.name))
    return found


def _carries(pid: int, entry: bytes) -> bool:
    """Whether `entry` (NAME=value) is one whole entry of the process's environment."""
    try:
        return entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


# -- families: children, groups, a run's processes -------------------------------------------


def children(pid: int) -> list[int]:
    """Live processes whose parent is `pid`: read from its threads' `children` files (a few
    bytes each) where the kernel has them, rather than from every process's stat (a start
    polls this every few milliseconds; the whole of /proc took 10 ms a read on a busy host)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
        listed = [Path(f"/proc/{pid}/task/{t}/children").read_bytes() for t in threads]
    except FileNotFoundError:  # gone (nothing is its child), or a kernel without the files
        if os.path.exists(f"/proc/{pid}"):
            return [info.pid for info in list_processes() if info.alive and info.ppid == pid]
        return []
    except OSError:
        return []
    return [
        child
        for data in listed
        for child in map(int, data.split())
        if state(child) not in (None, "Z", "X")
    ]


def holds_group(pid: int, started: int) -> bool:
    """Whether the process group `pid` led is still ours to signal: its leader is ours (alive,
    or a zombie not yet collected), or the leader is gone and members are left (a group id is
    never handed to another process while the group has members)."""
    began = start_time(pid)
    if began is not None:
        return began == started
    return bool(group_members(pid))


def group_members(pgid: int) -> list[int]:
    """Live processes in process group `pgid`."""
    return [p.pid for p in list_processes() if p.alive and p.pgid == pgid]


def started_by(leader: int, tag: bytes) -> set[int]:
    """Live processes of a run: its session, its descendants (also those in a session of
    their own), and any process with `tag` (NAME=value) in its environment (daemons that left
    both). The calling process is never one of them, whatever its ancestry."""
    parents: dict[int, int] = {}
    found: set[int] = set()
    for info in list_processes():
        if not info.alive:
            continue
        parents[info.pid] = info.ppid
        if info.pid == leader or info.session == leader or _carries(info.pid, tag):
            found.add(info.pid)
    while more := {p for p, pp in parents.items() if pp in found and p not in found}:
        found |= more
    found.discard(os.getpid())
    return found


__all__ = [
    "ProcessInfo",
    "children",
    "find_process",
    "group_members",
    "holds_group",
    "is_running",
    "list_processes",
    "parse_stat",
    "process_info",
    "start_time",
    "started_by",
    "state",
    "with_argument",
    "with_environment",
]
