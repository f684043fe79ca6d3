"""Process sandboxes on gVisor: the sandbox's code talks to gVisor's kernel, never the host's.

`runsc` (Debian's gVisor) runs each sandbox's agent server from an OCI bundle laid out as
bubblewrap's mount plan (`isolation`): a read-only empty root holding the system and the
installed program read-only, the sandbox's own directory read-write (and its workspace at
/workspace/project), its own /tmp and a bounded /dev/shm; the control plane's state covered
where a bound path would show it. Its one process runs as the sandbox's own uid, with no
capability and no-new-privs, under `tini` (a pid 1 that reaps what the agent's commands
orphan). gVisor's Sentry serves every system call of what runs there; to the host it is a
`runsc-sandbox` process and a `runsc-gofer` (which opens the bound files), held by the
sandbox's cgroup (the launcher enters it first; `--ignore-cgroups` keeps runsc out of the way).

The network is the sandbox's namespace behind the boundary, entered before runsc starts:
`--network=host` passes the Sentry's sockets to the namespace it runs in (gVisor's own network
stack refuses to start here, docs/gvisor.md). The bundle and runsc's state are the control
plane's (`.gvisor/<sandbox>` beside the sandboxes' directories, root's alone), made anew at each
start and removed with the sandbox.

A template cannot fork into a gVisor sandbox (its processes are not the host's): each start
boots gVisor and an interpreter.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import resource
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from control_plane.providers.process.isolation import (
    ACCOUNT_FILES,
    HOME,
    PROJECT,
    SYSTEM_DIRS,
    SYSTEM_LINKS,
    Command,
    Isolation,
    IsolationUnavailable,
    accounts,
    program_paths,
    resolver_dirs,
    trial,
)
from control_plane.sandboxes.provider import DEFAULT_LIMITS, Limits

logger = logging.getLogger(__name__)

Platform = Literal["ptrace", "kvm"]
BUNDLES = ".gvisor"
"""Beside the sandboxes' directories: each sandbox's bundle and runsc's state, root's alone."""
CONTAINER = "sandbox"
"""The container's name in its own runsc state directory (one container per directory)."""
#: runsc answers its control commands (pause, resume) within this, or it is stuck.
CONTROL_TIMEOUT = 30.0


def bundle_from(launcher: int) -> Path | None:
    """The bundle named on the command line of a sandbox's `runsc run` (None: it is gone)."""
    try:
        argv = Path(f"/proc/{launcher}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    for flag, value in zip(argv, argv[1:]):
        if flag == b"--bundle":
            return Path(os.fsdecode(value))
    return None


def bundle_of(root_dir: Path) -> Path:
    """The sandbox's bundle: outside its own directory, so nothing it writes is read there."""
    return root_dir.parent / BUNDLES / root_dir.name


@dataclass(frozen=True, kw_only=True)
class Gvisor(Isolation):
    runsc: str
    tini: str
    platform: Platform = "ptrace"
    described: ClassVar[str] = "on gVisor: a kernel of its own"
    own_kernel: ClassVar[bool] = True

    def command(
        self,
        root_dir: Path,
        argv: Sequence[str],
        uid: int | None,
        env: dict[str, str],
        resolv_conf: bytes | None = None,
    ) -> Command:
        """Writes the sandbox's bundle (blocking, a few small files) and gives runsc's command
        line; `env` goes in the bundle, the launcher gets a PATH only."""
        if uid is None:
            raise IsolationUnavailable("gVisor sandboxes are started by root only")
        bundle = bundle_of(root_dir)
        shutil.rmtree(bundle, ignore_errors=True)  # a start's leftovers (runsc's state too)
        bundle.parent.mkdir(mode=0o700, exist_ok=True)
        bundle.mkdir(mode=0o700)
        (bundle / "rootfs").mkdir(mode=0o755)
        mounts = _mounts(root_dir, bundle, uid, resolv_conf, self.hidden, self.limits)
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
        spec: dict[str, Any] = {
            "ociVersion": "1.0.2",
            "process": {
                "terminal": False,
                "user": {"uid": uid, "gid": uid},
                "args": [self.tini, "--", *argv],
                "env": [f"{k}={v}" for k, v in env.items()],
                "cwd": str(root_dir),
                "capabilities": {
                    "bounding": [],
                    "effective": [],
                    "inheritable": [],
                    "permitted": [],
                    "ambient": [],
                },
                "noNewPrivileges": True,
                "rlimits": [{"type": "RLIMIT_NOFILE", "soft": nofile[0], "hard": nofile[1]}],
            },
            "root": {"path": "rootfs", "readonly": True},
            "hostname": "sandbox",
            "mounts": mounts,
            "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount")]},
        }
        (bundle / "config.json").write_text(json.dumps(spec))
        return Command(
            [*self.runsc_argv(bundle), "run", "--bundle", str(bundle), CONTAINER],
            {},
            {"PATH": os.defpath},
        )

    def marker(self, root_dir: Path) -> str:
        return str(bundle_of(root_dir))

    def runsc_argv(self, bundle: Path) -> list[str]:
        return [
            self.runsc,
            "--root",
            str(bundle / "state"),
            f"--platform={self.platform}",
            "--network=host",
            "--ignore-cgroups",
        ]

    async def control(self, launcher: int, *action: str) -> None:
        """runsc's `action` on the sandbox whose launcher (`runsc run`) is `launcher`: pause and
        resume are gVisor's kernel stopping every task itself (a signal to the Sentry would
        leave the code it runs natively going), `kill` signals the sandbox's pid 1 (the
        launcher forwards no signal). IsolationUnavailable with runsc's words when it fails."""
        bundle = bundle_from(launcher)
        if bundle is None:
            raise IsolationUnavailable("the sandbox's runsc is gone")
        # In the sandbox's network namespace: runsc reaches its sandbox by an abstract socket,
        # which is the namespace's (from another, runsc finds none, takes the sandbox for
        # stopped and forgets it).
        nsenter = shutil.which("nsenter") or "/usr/bin/nsenter"
        process = await asyncio.create_subprocess_exec(
            nsenter,
            f"--net=/proc/{launcher}/ns/net",
            "--",
            *self.runsc_argv(bundle),
            *action,
            CONTAINER,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            _, said = await asyncio.wait_for(process.communicate(), CONTROL_TIMEOUT)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise IsolationUnavailable(
                f"the sandbox's gVisor did not {action[0]}: runsc did not answer"
            ) from None
        if process.returncode != 0:
            words = said.decode(errors="replace").strip().splitlines() or ["no message"]
            raise IsolationUnavailable(
                f"the sandbox's gVisor did not {action[0]}: {words[-1][-300:]}"
            )

    async def pause(self, launcher: int) -> None:
        await self.control(launcher, "pause")

    async def resume(self, launcher: int) -> None:
        await self.control(launcher, "resume")

    async def terminate(self, launcher: int) -> bool:
        """runsc's launcher forwards no signal: gVisor's kernel continues the sandbox (runsc
        refuses that when it is not paused) and gives its pid 1 SIGTERM."""
        with contextlib.suppress(IsolationUnavailable):
            await self.control(launcher, "resume")
        with contextlib.suppress(IsolationUnavailable):
            await self.control(launcher, "kill", "TERM")
            return True
        return False

    def remove(self, root_dir: Path) -> None:
        shutil.rmtree(bundle_of(root_dir), ignore_errors=True)


def _mounts(
    root_dir: Path,
    bundle: Path,
    uid: int,
    resolv_conf: bytes | None,
    hidden: tuple[Path, ...],
    limits: Limits,
) -> list[dict[str, Any]]:
    """bubblewrap's plan as OCI mounts, in order (a later one lands on an earlier one)."""

    def bind(source: Path | str, target: Path | str, mode: str = "ro") -> dict[str, Any]:
        return {
            "destination": str(target),
            "type": "bind",
            "source": str(source),
            "options": ["rbind", mode],
        }

    def tmpfs(target: str, *options: str) -> dict[str, Any]:
        return {
            "destination": target,
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "nodev", *options],
        }

    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        tmpfs("/tmp", "mode=1777", f"size={limits.tmp}"),
        tmpfs("/dev/shm", "mode=1777", f"size={limits.shm}"),
    ]
    bound = [*(Path(p) for p in SYSTEM_DIRS), *program_paths()]
    for link in SYSTEM_LINKS:  # merged /usr: /bin is /usr/bin (OCI makes no symbolic links)
        if os.path.isdir(link):
            mounts.append(bind(os.path.realpath(link), link))
    mounts += [bind(path, path) for path in SYSTEM_DIRS]
    for path, data in zip(ACCOUNT_FILES, accounts(uid, root_dir / HOME).values()):
        copy = bundle / Path(path).name
        copy.write_bytes(data)
        copy.chmod(0o644)
        mounts.append(bind(copy, path))
    if resolv_conf is None:
        mounts += [bind(d, d) for d in resolver_dirs()]
    else:
        (bundle / "resolv.conf").write_bytes(resolv_conf)
        (bundle / "resolv.conf").chmod(0o644)
        # Where the host's resolv.conf leads (a link out of /etc), the sandbox's is put there.
        target = Path(os.path.realpath("/etc/resolv.conf"))
        if any(target.is_relative_to(p) for p in SYSTEM_DIRS):
            target = Path("/etc/resolv.conf")
        mounts.append(bind(bundle / "resolv.conf", target))
    mounts += [bind(program, program) for program in program_paths()]
    mounts += [
        tmpfs(str(h), "mode=0755") for h in hidden if any(h.is_relative_to(p) for p in bound)
    ]
    mounts += [bind(root_dir, root_dir, "rw"), bind(root_dir / "workspace", PROJECT, "rw")]
    return mounts


def choose(
    *,
    hidden: Sequence[Path],
    uids: tuple[int, int],
    platform: Platform = "ptrace",
    limits: Limits = DEFAULT_LIMITS,
) -> Gvisor:
    """gVisor isolation, tried once here (a sandbox of its kind runs `true`); said in one
    line at start. Raises IsolationUnavailable, with the reason, where it cannot be had: it
    was asked for, and nothing weaker is put in its place."""
    if os.geteuid() != 0:
        raise IsolationUnavailable(
            "CONTROL_PLANE_SANDBOX_ISOLATION=gvisor, but the control "
            "plane does not run as root (runsc starts sandboxes as root)"
        )
    missing = [
        (tool, package)
        for tool, package in (("runsc", "runsc"), ("tini", "tini"))
        if shutil.which(tool) is None
    ]
    if missing:
        raise IsolationUnavailable(
            "CONTROL_PLANE_SANDBOX_ISOLATION=gvisor, but "
            + " and ".join(t for t, _ in missing)
            + " not installed (Debian: apt-get install "
            + " ".join(p for _, p in missing)
            + ")"
        )
    gvisor = Gvisor(
        runsc=shutil.which("runsc") or "runsc",
        tini=shutil.which("tini") or "tini",
        hidden=tuple(Path(p) for p in hidden),
        uids=uids,
        platform=platform,
        limits=limits,
    )
    failed = trial(gvisor, uids[0], timeout=60)
    if failed is not None:
        raise IsolationUnavailable(
            "CONTROL_PLANE_SANDBOX_ISOLATION=gvisor, but runsc cannot "
            f"start a sandbox here ({failed})"
        )
    logger.info(
        "process sandboxes run on gVisor (runsc, %s platform), each as its own uid from %d-%d",
        platform,
        *uids,
    )
    return gvisor
