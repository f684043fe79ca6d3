"""Finding and killing every process a shell started, by reading /proc."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def kill_all(leader: int, tag: bytes) -> None:
    """SIGKILL bash and all it started until none is left (a dying process may have forked).
    Blocking (it reads /proc): run in a thread."""
    for _ in range(50):
        victims = _started_by(leader, tag)
        if not victims:
            return
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


def _started_by(leader: int, tag: bytes) -> set[int]:
    """Live processes of the shell: its session, its descendants (also those in a session of
    their own), and any process with its environment tag (daemons that left both).
    """
    parents: dict[int, int] = {}
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        state, ppid, _group, session = stat[stat.rfind(b")") + 2 :].split()[:4]
        if state in (b"Z", b"X"):  # already dead, only waiting for its parent
            continue
        parents[pid] = int(ppid)
        if pid == leader or int(session) == leader or _carries(pid, tag):
            found.add(pid)
    while more := {p for p, pp in parents.items() if pp in found and p not in found}:
        found |= more
    found.discard(os.getpid())
    return found


def _carries(pid: int, tag: bytes) -> bool:
    try:
        return tag in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
