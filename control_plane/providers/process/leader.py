"""The process kind's ref: the sandbox's launcher, the leader of its process group.

A process sandbox is found again by the pid of the process this control plane started (the
agent server, or bubblewrap's or runsc's launcher when isolated), which leads the group that
everything of the sandbox is signalled through. A pid alone is not enough: once the sandbox
is gone the kernel gives it to another process, which a restarted control plane must not
adopt, pause or kill. The kernel start time of the pid (clock ticks since boot) tells the two
apart, so the ref holds both, as `"<pid>:<start time>"`. This is also the shape the migration
to refs (store revision 0008) wrote from the old `pid` and `pid_start_time` columns, so a
sandbox that ran across that upgrade is read like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

from control_plane.sandboxes.provider import Handle, ProviderError
from core import processes


@dataclass(frozen=True)
class Leader:
    """The process a process sandbox's handle names: its pid, and that pid's start time."""

    pid: int
    started: int
    """The kernel start time of `pid` (clock ticks since boot): tells a reused pid from ours."""

    @property
    def ref(self) -> str:
        """What the handle keeps of it (`Handle.ref`)."""
        return f"{self.pid}:{self.started}"

    @classmethod
    def of(cls, handle: Handle) -> Leader:
        """The leader `handle` names; ProviderError when its ref is not a process's."""
        pid, colon, started = handle.ref.partition(":")
        try:
            if colon:
                return cls(pid=int(pid), started=int(started))
        except ValueError:
            pass
        raise ProviderError(f"sandbox {handle.sandbox_id}: not a process's ref: {handle.ref!r}")

    def running(self) -> bool:
        """The pid still runs the process that was started (not another that reused it)."""
        return processes.is_running(self.pid, self.started)

    def holds_group(self) -> bool:
        """The group it led is still ours to signal: it lives (or is a zombie not yet
        collected), or it is gone and members are left (`processes.holds_group`)."""
        return processes.holds_group(self.pid, self.started)
