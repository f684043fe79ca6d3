"""What a process sandbox may see of this machine, and who it runs as: bubblewrap's view.

Each agent server and everything it starts runs in namespaces of its own, made by bubblewrap
(`bwrap`, the tool Flatpak runs its applications in):
- a mount namespace whose root is an empty tmpfs, holding only the system read-only (`/usr`,
  `/etc` and the `/bin`, `/lib*` links), the installed program read-only (the interpreter, the
  virtual environment and the `agent_server`, `core`, `launch`, `web`, `events`, `tools`
  packages, nothing else of a source tree), the sandbox's own directory read-write (its state
  and workspace, at the same path as outside), its workspace once more at `/workspace/project`
  (where OpenHands clients expect it: the agent server's working directory), a `/tmp` of its own
  (its TMPDIR), a `/dev` and a bounded `/dev/shm` of its own; not the control plane's state
  directory, not another sandbox's directory, not the host's home (what of the control plane's
  state would show through a bound path is covered by an empty tmpfs);
- a pid namespace with its own `/proc`: the sandbox sees its own processes only, and when its
  pid 1 (bubblewrap's reaper) ends, the kernel kills whatever is left in it;
- ipc, uts and cgroup namespaces of its own. The network is the host's (the LLM, the control
  plane's webhook): a sandbox connects to loopback services; another sandbox's agent server
  answers only with its key.

When the control plane runs as root, bubblewrap needs no user namespace, and each sandbox runs
as a uid of its own (`setpriv` drops to it inside, with no capabilities and no-new-privs): the
sandbox's directory is 0700 and its owner is how the uid is remembered across restarts. File
modes then hold even where a namespace would not (the control plane's state is 0700 root's).
Run as another user, bubblewrap makes a user namespace, and every sandbox is that user.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib.util
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from control_plane.providers.process import seccomp
from control_plane.providers.process.spawn import spawn, wait
from control_plane.sandboxes.provider import DEFAULT_LIMITS, Limits, ProviderError

logger = logging.getLogger(__name__)

Mode = Literal["auto", "bubblewrap", "off"]
#: What the agent server imports of this distribution (the control plane is not among them).
PACKAGES = ("agent_server", "core", "launch", "web", "events", "tools")
#: Top-level links (merged /usr) or directories of the system.
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_DIRS = ("/usr", "/etc")
HOME = "home"
"""The sandbox's HOME, under its own directory (the host's home is not there)."""
UIDS_LOCK = ".uids.lock"
ACCOUNT_FILES = ("/etc/passwd", "/etc/group")
#: Where bubblewrap reads the sandbox's account files from (after stdin, stdout, stderr).
ACCOUNT_FDS = (3, 4)
#: Where bubblewrap reads the sandbox's own resolv.conf from (behind the network boundary).
RESOLV_FD = 5
#: Where bubblewrap reads the sandbox's seccomp filter from (`seccomp.program`).
SECCOMP_FD = 6
ACCOUNT = "agent"
READY_FILE = "ready.json"
"""Where a sandbox's agent server says it is ready (its port), in the sandbox's directory."""
PROJECT = Path("/workspace/project")
"""The workspace inside the namespace (the sandbox's `workspace/` bound there too)."""


class IsolationUnavailable(ProviderError):
    """Isolation was required (`bubblewrap`) and cannot be had here; the message says why."""


@dataclass(frozen=True)
class Command:
    """The launcher's command line, the environment it is given, and the data it reads from
    descriptors (number -> bytes, which the spawn puts there)."""

    argv: list[str]
    files: dict[int, bytes]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Isolation:
    """How this control plane's process sandboxes are isolated: what every kind offers the
    process provider (bubblewrap's namespaces here, gVisor's kernel in `gvisor`)."""

    hidden: tuple[Path, ...]
    """Never visible inside, even where a bound path holds them (the control plane's state)."""
    uids: tuple[int, int] | None
    """Root: each sandbox runs as a uid of its own from this range (first, last)."""
    limits: Limits = DEFAULT_LIMITS
    """What one sandbox may use: its /tmp and /dev/shm are sized from its memory."""
    seccomp: bytes | None = None
    """The system calls its code is refused, as a BPF program (`seccomp.program`); None: none
    (a kernel of its own serves them)."""
    described: ClassVar[str]
    """What the sandbox spec says of it."""
    own_kernel: ClassVar[bool] = False
    """Its processes are not the host's (gVisor): no template forks a server into it, and of
    it /proc shows its launcher's processes alone."""

    def command(
        self,
        root_dir: Path,
        argv: Sequence[str],
        uid: int | None,
        env: dict[str, str],
        resolv_conf: bytes | None = None,
    ) -> Command:
        """`argv` run with `env` inside the sandbox whose directory is `root_dir` (as `uid`
        when given: the sandbox's /etc/passwd and /etc/group then name it, as programs
        expect); `resolv_conf`: its /etc/resolv.conf (a sandbox behind the network boundary
        asks the control plane's resolver), instead of the host's."""
        raise NotImplementedError

    async def pause(self, launcher: int) -> None:
        """What stops the sandbox besides SIGSTOP to its launcher's group and its other
        processes (`signals`: nothing, unless its kernel is its own)."""

    async def resume(self, launcher: int) -> None:
        """What continues it besides SIGCONT (nothing, unless its kernel is its own)."""

    async def terminate(self, launcher: int) -> bool:
        """Asks the sandbox's server to end where SIGTERM to the launcher's group would not
        reach it; False: the caller signals the group."""
        return False

    def remove(self, root_dir: Path) -> None:
        """What of the sandbox lives outside its directory, removed with it (nothing here)."""

    def marker(self, root_dir: Path) -> str:
        """One whole argument of the launcher's command line that names the sandbox: how a
        restarted control plane finds a start that was cut short."""
        return str(root_dir / READY_FILE)

    def env(self, root_dir: Path) -> dict[str, str]:
        """What the sandbox's environment gets on top of the usual: its own home, and its own
        /tmp for temporary files (a TMPDIR of the control plane's names a directory the
        sandbox has not got, where every terminal command would fail)."""
        return {"HOME": str(root_dir / HOME), "TMPDIR": "/tmp", "TMP": "/tmp", "TEMP": "/tmp"}

    def own(self, root_dir: Path) -> int | None:
        """The sandbox's uid (root only), its directory and those in it made its own: the
        directory's owner when it is already one of the range (a sandbox started again),
        otherwise a uid no other sandbox directory and no process uses. Blocking."""
        if self.uids is None:
            return None
        first, last = self.uids
        with _locked(root_dir.parent / UIDS_LOCK):
            uid = root_dir.stat().st_uid
            if not first <= uid <= last:
                uid = _free_uid(first, last, _uids_in_use(root_dir.parent))
            for path in [root_dir, *root_dir.iterdir()]:
                if path.is_dir() and not path.is_symlink():
                    os.chown(path, uid, uid)
        return uid


@dataclass(frozen=True, kw_only=True)
class Bubblewrap(Isolation):
    """Namespaces of the host's kernel, made by bubblewrap (the module's docstring)."""

    bwrap: str
    setpriv: str = "setpriv"
    described: ClassVar[str] = "isolated by bubblewrap"

    def command(
        self,
        root_dir: Path,
        argv: Sequence[str],
        uid: int | None,
        env: dict[str, str],
        resolv_conf: bytes | None = None,
    ) -> Command:
        files = {} if uid is None else accounts(uid, root_dir / HOME)
        if resolv_conf is not None:
            files[RESOLV_FD] = resolv_conf
        if self.seccomp is not None:
            files[SECCOMP_FD] = self.seccomp
        args = [
            self.bwrap,
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]
        if os.geteuid() != 0:
            args.append("--unshare-user")
        # /tmp first: a bound path under the host's /tmp (a test's sandbox) lands on top of it.
        args += ["--perms", "1777", "--size", str(self.limits.tmp), "--tmpfs", "/tmp"]
        bound = [*(Path(p) for p in SYSTEM_DIRS), *program_paths()]
        for link in SYSTEM_LINKS:
            if os.path.islink(link):
                args += ["--symlink", os.readlink(link), link]
            elif os.path.isdir(link):
                args += ["--ro-bind", link, link]
                bound.append(Path(link))
        for path in SYSTEM_DIRS:
            args += ["--ro-bind", path, path]
        for fd, path in zip(ACCOUNT_FDS, ACCOUNT_FILES):
            if fd in files:
                args += ["--perms", "0644", "--ro-bind-data", str(fd), path]
        if resolv_conf is None:
            for resolver in resolver_dirs():
                args += ["--ro-bind-try", str(resolver), str(resolver)]
        else:
            # Where the host's resolv.conf leads (a link out of /etc: systemd-resolved's), the
            # sandbox's own is put at the link's end, on the sandbox's empty root.
            target = Path(os.path.realpath("/etc/resolv.conf"))
            if not any(target.is_relative_to(p) for p in SYSTEM_DIRS):
                args += ["--dir", str(target.parent)]
            else:
                target = Path("/etc/resolv.conf")
            args += ["--perms", "0644", "--ro-bind-data", str(RESOLV_FD), str(target)]
        for program in program_paths():
            args += ["--ro-bind", str(program), str(program)]
        args += ["--proc", "/proc", "--dev", "/dev"]
        # Its own shared memory (POSIX semaphores: multiprocessing's locks), bounded as Docker's.
        args += ["--perms", "1777", "--size", str(self.limits.shm), "--tmpfs", "/dev/shm"]
        masked = [hidden for hidden in self.hidden if any(hidden.is_relative_to(p) for p in bound)]
        for hidden in masked:
            args += ["--tmpfs", str(hidden)]
        args += ["--bind", str(root_dir), str(root_dir)]
        args += ["--bind", str(root_dir / "workspace"), str(PROJECT)]
        # bubblewrap makes the directories leading to a mount point 0700: they are opened up
        # for the sandbox's user (empty but for the mount points; never a host directory).
        for parent in _leading_dirs(
            [*bound, *masked, root_dir, PROJECT],
            bound=[*bound, root_dir, PROJECT],
            tmpfs=[Path("/tmp"), *masked],
        ):
            args += ["--chmod", "0755", str(parent)]
        if self.seccomp is not None:  # on what bubblewrap runs last, and all it starts
            args += ["--seccomp", str(SECCOMP_FD)]
        args += ["--chdir", str(root_dir), "--"]
        if uid is not None:
            args += [
                self.setpriv,
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                "--",
            ]
        return Command(args + list(argv), files, env)


def choose(
    mode: Mode, *, hidden: Sequence[Path], uids: tuple[int, int], limits: Limits = DEFAULT_LIMITS
) -> Isolation | None:
    """The isolation `mode` asks for, tried once here; said in one line at start.

    Raises IsolationUnavailable when `bubblewrap` is required and does not work here."""
    if mode == "off":
        logger.warning(
            "sandbox isolation is off (CONTROL_PLANE_SANDBOX_ISOLATION=off): "
            "process sandboxes run as this control plane's user and can read its "
            "state and each other's files"
        )
        return None
    isolation, reason = _probe(tuple(Path(p) for p in hidden), uids, limits)
    if isolation is not None:
        whom = (
            f"each as its own uid from {uids[0]}-{uids[1]}"
            if isolation.uids
            else "as this control plane's user in a user namespace"
        )
        logger.info("process sandboxes are isolated with bubblewrap (%s)", whom)
        return isolation
    if mode == "bubblewrap":
        raise IsolationUnavailable(f"CONTROL_PLANE_SANDBOX_ISOLATION=bubblewrap, but {reason}")
    logger.warning(
        "process sandboxes are NOT isolated (%s): they run as this control plane's "
        "user and can read its state and each other's files; sandboxes are refused "
        "to a second user unless CONTROL_PLANE_SHARED_HOST=true",
        reason,
    )
    return None


def _probe(
    hidden: tuple[Path, ...], uids: tuple[int, int], limits: Limits
) -> tuple[Isolation | None, str]:
    """Isolation when a sandbox of its kind starts here (bubblewrap installed, namespaces
    allowed); otherwise None and why not."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "bubblewrap is not installed (Debian: apt-get install bubblewrap)"
    root = os.geteuid() == 0
    setpriv = shutil.which("setpriv") or "setpriv"
    if root and shutil.which("setpriv") is None:
        return None, "setpriv (util-linux) is not installed"
    isolation = Bubblewrap(
        bwrap=bwrap,
        hidden=hidden,
        uids=uids if root else None,
        setpriv=setpriv,
        limits=limits,
        seccomp=seccomp.program(),
    )
    failed = trial(isolation, uids[0] if root else None, timeout=30)
    if failed is not None:
        return None, f"bubblewrap cannot make a sandbox here ({failed})"
    return isolation, ""


def trial(isolation: Isolation, uid: int | None, timeout: float) -> str | None:
    """Runs `true` in a sandbox of `isolation`'s kind, made in a scratch directory: None when
    it ran, otherwise the last line said (or that it hung). What `choose` tries at start."""
    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as scratch:
        root = Path(scratch) / "probe"
        (root / "workspace").mkdir(parents=True)
        if uid is not None:
            os.chown(root, uid, uid)
        command = isolation.command(root, ["true"], uid, {"PATH": os.defpath})
        said = Path(scratch) / "probe.log"
        with open(said, "wb") as output:
            try:
                pid = spawn(command.argv, command.env, output=output.fileno(), files=command.files)
            except OSError as exc:
                return f"it could not run: {exc}"
        status = wait(pid, timeout)
        if status is None:
            os.killpg(pid, signal.SIGKILL)
            wait(pid, 5)
        text = said.read_text(errors="replace").strip()
        isolation.remove(root)
    if status == 0:
        return None
    if status is None:
        return f"it did not finish within {timeout:g} s"
    return (text.splitlines() or [f"exit status {status}, no message"])[-1]


@functools.cache
def program_paths() -> tuple[Path, ...]:
    """The interpreter, the virtual environment and the packages the agent server imports.
    Found once: where they are does not change while this process runs, and looking them up
    took half a millisecond per start."""
    paths = {Path(sys.base_prefix), Path(sys.prefix)}
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            paths.add(Path(location))
    system = [Path(p) for p in SYSTEM_DIRS]
    return tuple(sorted(p for p in paths if not any(p.is_relative_to(s) for s in system)))


def accounts(uid: int, home: Path) -> dict[int, bytes]:
    """The host's /etc/passwd and /etc/group with the sandbox's user (`agent`) added."""
    files = {}
    lines = (f"{ACCOUNT}:x:{uid}:{uid}:agent sandbox:{home}:/bin/bash\n", f"{ACCOUNT}:x:{uid}:\n")
    for fd, path, line in zip(ACCOUNT_FDS, ACCOUNT_FILES, lines):
        try:
            text = Path(path).read_bytes()
        except OSError:
            text = b""
        files[fd] = text + (b"" if text.endswith(b"\n") or not text else b"\n") + line.encode()
    return files


def _leading_dirs(
    points: Sequence[Path], *, bound: Sequence[Path], tmpfs: Sequence[Path]
) -> list[Path]:
    """The directories above `points` that bubblewrap made: neither in a bound host directory
    nor a tmpfs of its own (their modes are set already), outermost first. On strings, with
    set lookups: once per start, where `Path.is_relative_to` over every pair took 3-4 ms."""
    held = {str(path) for path in bound}
    skip = {str(path) for path in tmpfs}
    found: set[str] = set()
    for point in points:
        parent = os.path.dirname(str(point))
        while parent != "/" and parent not in found:  # above one found: all walked already
            if parent not in skip and not _within(parent, held):
                found.add(parent)
            parent = os.path.dirname(parent)
    return sorted(map(Path, found), key=lambda path: len(path.parts))


def _within(path: str, dirs: set[str]) -> bool:
    """Whether `path` (absolute, normal) is one of `dirs` or inside one."""
    while path not in dirs:
        up = os.path.dirname(path)
        if up == path:
            return False
        path = up
    return True


def resolver_dirs() -> list[Path]:
    """/etc/resolv.conf's real directory, when it is a link out of the bound system (e.g.
    systemd-resolved's /run/systemd/resolve)."""
    target = Path(os.path.realpath("/etc/resolv.conf"))
    if any(target.is_relative_to(p) for p in SYSTEM_DIRS):
        return []
    return [target.parent]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One uid choice at a time among this control plane's processes."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _uids_in_use(sandboxes_dir: Path) -> set[int]:
    """Owners of the sandbox directories here, and real uids of every process (another
    control plane's sandboxes among them)."""
    used = set()
    for entry in os.scandir(sandboxes_dir):
        with contextlib.suppress(OSError):
            used.add(entry.stat(follow_symlinks=False).st_uid)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:  # one read of its start, where the Uid line is: half the cost of a line loop
            fd = os.open(f"/proc/{name}/status", os.O_RDONLY)
            try:
                status = os.read(fd, 1024)
            finally:
                os.close(fd)
            at = status.index(b"\nUid:") + 5
            used.add(int(status[at : status.index(b"\t", at + 1)]))
        except (OSError, ValueError):
            continue
    return used


def _free_uid(first: int, last: int, used: set[int]) -> int:
    """A random free uid of the range (a reused one is less likely to meet what a dead
    sandbox left); the lowest free one when random tries keep hitting used ones."""
    for _ in range(64):
        uid = first + secrets.randbelow(last - first + 1)
        if uid not in used:
            return uid
    for uid in range(first, last + 1):
        if uid not in used:
            return uid
    raise ProviderError(f"every uid of {first}-{last} is in use (CONTROL_PLANE_SANDBOX_UIDS)")
