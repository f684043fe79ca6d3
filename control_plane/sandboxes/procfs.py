"""Facts about processes from /proc: is a pid still the process we started, and is it stopped."""

from __future__ import annotations

import os
import signal


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


def with_environment(entry: bytes) -> list[int]:
    """Pids whose environment holds exactly `entry` (NAME=value): finds children whose pid was
    never recorded (their parent died while they started)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                if entry in handle.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found
