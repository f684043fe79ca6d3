"""What one process sandbox may use of this machine: a control group each, as Docker gives a
container, so one tenant's agent cannot take the memory, processes or CPU the others need.

The kernel's cgroup file system does the work (no daemon): a directory per sandbox under
`agent-sandboxes/`, its limits written into it, and the sandbox's first process moved in before
it runs anything (`enter`: a shell writes its own pid, then execs), so all it starts is counted.
A sandbox over its memory has its largest process killed by the kernel (the agent's build or
test, not its server); over its process count, fork fails inside it. cgroup v2 (one hierarchy)
and v1 (the `memory`, `pids` and `cpu` hierarchies, as on these VMs) are both taken.

Only root writes there; elsewhere (or where the controllers are not offered) `find` says why
and sandboxes run without limits, as the start's log line says once.

A sandbox's processes are also listed and ended through its group (`Leaf`, what a stop uses):
in cgroup v2 the kernel keeps the list (`cgroup.procs`, whatever session or parent a process
has), says when it is empty (`cgroup.events`) and kills it whole (`cgroup.kill`, Linux 5.14),
where reading /proc for them takes a scan of every process of the host. With v1 limits and a
v2 hierarchy beside them (systemd's hybrid layout, `unified/`), each sandbox gets a leaf there
too (`Cgroups.tracker`): no limits, only that list and that kill.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from control_plane.sandboxes.provider import Limits, ProviderError

logger = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")
GROUP = "agent-sandboxes"
CONTROLLERS = ("memory", "pids", "cpu")
#: The CPU quota's period (microseconds), as Docker uses.
PERIOD = 100_000
#: Settings a kernel may not offer (swap accounting off): left out then.
OPTIONAL = frozenset({"memory.swap.max"})
#: Where the hybrid layout mounts its cgroup v2 hierarchy, beside the v1 ones.
UNIFIED = "unified"


@dataclass(frozen=True)
class Cgroups:
    """Where this machine's sandbox groups go: one directory per hierarchy (v2: one)."""

    parents: tuple[Path, ...]
    v2: bool
    tracker: Path | None = None
    """With v1 limits, `agent-sandboxes/` in the v2 hierarchy beside them (None: there is
    none): each sandbox gets a leaf there too, which only lists and kills its processes."""

    def create(self, sandbox_id: str, limits: Limits) -> list[Path]:
        """The sandbox's groups, made (again) with `limits`: what `enter` moves a process into."""
        made = []
        try:
            for parent in self.parents:
                group = parent / sandbox_id
                group.mkdir(exist_ok=True)
                made.append(group)
                for name, value in self._settings(parent, limits):
                    if name not in OPTIONAL or (group / name).exists():
                        (group / name).write_text(value)
            if self.tracker is not None:
                (self.tracker / sandbox_id).mkdir(exist_ok=True)
                made.append(self.tracker / sandbox_id)
        except OSError as exc:
            raise ProviderError(f"the sandbox's cgroup could not be made: {exc}") from None
        return made

    def _settings(self, parent: Path, limits: Limits) -> list[tuple[str, str]]:
        quota = str(max(int(limits.cpus * PERIOD), 1000))
        if self.v2:
            return [
                ("memory.max", str(limits.memory)),
                ("memory.swap.max", "0"),
                ("pids.max", str(limits.pids)),
                ("cpu.max", f"{quota} {PERIOD}"),
            ]
        return {
            "memory": [("memory.limit_in_bytes", str(limits.memory))],
            "pids": [("pids.max", str(limits.pids))],
            "cpu": [("cpu.cfs_period_us", str(PERIOD)), ("cpu.cfs_quota_us", quota)],
        }[parent.parent.name]

    def remove(self, sandbox_id: str, wait: float = 5.0) -> None:
        """The sandbox's groups, once nothing is left in them. Blocking: a process that has
        just ended keeps its group busy for a moment (until it is reaped), so a busy group
        is tried again for up to `wait` seconds; one still busy then stays, and says so."""
        deadline = time.monotonic() + wait
        for parent in (*self.parents, *([self.tracker] if self.tracker is not None else [])):
            while True:
                try:
                    (parent / sandbox_id).rmdir()
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    if exc.errno == errno.EBUSY and time.monotonic() < deadline:
                        time.sleep(0.02)
                        continue
                    logger.warning(
                        "cgroup %s of sandbox %s stays: %s",
                        parent.parent.name,
                        sandbox_id,
                        os.strerror(exc.errno or errno.EBUSY),
                    )
                break


def enter(groups: list[Path], argv: list[str]) -> list[str]:
    """`argv`, started inside `groups`: the shell moves itself in, then becomes `argv`."""
    if not groups:
        return argv
    moves = " && ".join(f"echo $$ > {shlex.quote(str(g / 'cgroup.procs'))}" for g in groups)
    return ["/bin/sh", "-c", f'{moves} && exec "$@"', "sh", *argv]


def find(root: Path = ROOT) -> Cgroups | str:
    """This machine's sandbox groups, made ready; or why there are none."""
    if os.geteuid() != 0:
        return "the control plane does not run as root"
    try:
        if (root / "cgroup.controllers").exists():
            return _v2(root)
        return _v1(root)
    except OSError as exc:
        return f"the cgroup file system refused: {exc}"


def _v2(root: Path) -> Cgroups | str:
    offered = set((root / "cgroup.controllers").read_text().split())
    if missing := set(CONTROLLERS) - offered:
        return f"cgroup v2 offers no {', '.join(sorted(missing))} controller"
    parent = root / GROUP
    parent.mkdir(exist_ok=True)
    for level in (root, parent):
        with contextlib.suppress(OSError):  # the root may have them already
            (level / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in CONTROLLERS))
    enabled = set((parent / "cgroup.subtree_control").read_text().split())
    if missing := set(CONTROLLERS) - enabled:
        return f"cgroup v2 did not delegate {', '.join(sorted(missing))} to {parent}"
    return Cgroups(parents=(parent,), v2=True)


def _v1(root: Path) -> Cgroups | str:
    parents = []
    for controller in CONTROLLERS:
        hierarchy = root / controller
        if not (hierarchy / "cgroup.procs").exists():
            return f"no cgroup v1 {controller} hierarchy at {hierarchy}"
        parent = hierarchy / GROUP
        parent.mkdir(exist_ok=True)
        parents.append(parent)
    return Cgroups(parents=tuple(parents), v2=False, tracker=_tracker(root / UNIFIED))


def _tracker(unified: Path) -> Path | None:
    """`agent-sandboxes/` in the v2 hierarchy the hybrid layout mounts beside v1's, made; None
    where there is none (or it refuses a group: the sandboxes are then listed from /proc)."""
    if not (unified / "cgroup.procs").exists():
        return None
    try:
        (unified / GROUP).mkdir(exist_ok=True)
    except OSError as exc:
        logger.info("no sandbox groups in %s: %s", unified, exc)
        return None
    return unified / GROUP


def v2_root(root: Path = ROOT) -> Path | None:
    """Where this machine's cgroup v2 hierarchy is mounted (alone, or beside v1's)."""
    for mount in (root, root / UNIFIED):
        if (mount / "cgroup.controllers").exists():
            return mount
    return None


@dataclass(frozen=True)
class Leaf:
    """A sandbox's own cgroup v2 group, as the kernel keeps it: every process of the sandbox
    is in it (or in a group below it), whatever its session or parent, as a child is born in
    its parent's group and only root moves one out. Reading it is a few small files, where
    /proc has every process of the host. Each call is one read or write of those files."""

    path: Path

    def pids(self) -> set[int]:
        """The processes in it and in the groups below it (zombies are not: they have ended)."""
        found: set[int] = set()
        for directory, _, _ in os.walk(self.path):
            with contextlib.suppress(OSError):  # a group below removed meanwhile
                found.update(map(int, Path(directory, "cgroup.procs").read_text().split()))
        return found

    def populated(self) -> bool:
        """Whether a live process is left in it or below it (`cgroup.events`)."""
        try:
            events = Path(self.path, "cgroup.events").read_text()
        except FileNotFoundError:
            return False  # removed, which only an empty group can be
        return "populated 1" in events.splitlines()

    def kill(self) -> bool:
        """SIGKILL to every process in it and below it, by the kernel (also to one forked
        meanwhile: none escapes); False when the kernel refused."""
        try:
            Path(self.path, "cgroup.kill").write_text("1")
        except FileNotFoundError:
            return not self.path.exists()  # removed: empty
        except OSError as exc:
            logger.warning("cgroup.kill of %s failed: %s", self.path, exc)
            return False
        return True


def leaf_of(pid: int, sandbox_id: str, root: Path = ROOT) -> Leaf | None:
    """The cgroup v2 group process `pid` is in, when it is sandbox `sandbox_id`'s own
    (`agent-sandboxes/<id>`, as `Cgroups.create` made it) and the kernel kills it whole
    (`cgroup.kill`, Linux 5.14). None where the process is in no such group (a sandbox started
    without cgroups, or in v1 ones only), or the kernel has no `cgroup.kill`: a caller then
    finds the sandbox's processes in /proc. A zombie still names its group."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    if f"0::/{GROUP}/{sandbox_id}" not in lines or "/" in sandbox_id:
        return None
    mount = v2_root(root)
    if mount is None or not (mount / GROUP / sandbox_id / "cgroup.kill").exists():
        return None
    return Leaf(mount / GROUP / sandbox_id)
