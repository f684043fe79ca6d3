"""Whether this host has room for one more sandbox: the caps on counts (per user, over all
users) are in the store; this is the memory left. A sandbox idles at a few hundred MiB, so a
host is refused new ones while the kernel's own estimate of the memory available for new work
(MemAvailable) is under a floor, rather than swapping every sandbox it runs."""

from __future__ import annotations

from pathlib import Path

MEMINFO = Path("/proc/meminfo")


def available() -> int | None:
    """Bytes of memory available for new work (None where the kernel does not say)."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_short(floor: int) -> str | None:
    """Why a new sandbox is refused for memory (None: it is not)."""
    left = available()
    if left is None or left >= floor:
        return None
    return (
        f"this host has {left // 2**20} MiB of memory available, under the "
        f"{floor // 2**20} MiB kept free (CONTROL_PLANE_SANDBOX_MEMORY_FLOOR): try again "
        "once some sandboxes are paused or deleted"
    )
