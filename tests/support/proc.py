"""What /proc says of one process, as the benches read it."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """Its user and system CPU seconds so far (all its threads, not its children): on a shared
    machine, a cost says more by its CPU time than by its wall time."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    rest = stat[stat.rfind(b")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
