"""The process provider: each sandbox is an `agent-server` child in its own process group.

The child listens on a loopback port the OS picks and reports it in a ready file
(`--ready-file`; one forked from the template also on a pipe, its launch environment's
`ready_fd`, which the start waits on instead of polling: `launch.ready`); it has its own state
and working directory, its own session key (handed over a pipe, never in its environment:
`agent_server.secrecy`) and the control plane's webhook address. Where bubblewrap works, it runs
isolated (`isolation`): the process started here, and stored as the sandbox's pid, is then
bubblewrap's, leading the group the agent server is in. Pause and resume are SIGSTOP and SIGCONT
of the group; destroy is SIGTERM, SIGKILL after a grace period, then the workspace archived and
the directory removed. Children are started in a new session so they outlive a control plane
that is killed: the next one adopts them from the stored pid and start time, or finds a start
cut short by its ready file's path on their command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import shutil
import signal
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

from control_plane.models import DiskUsage
from control_plane.network.boundary import Boundary
from control_plane.network.fence import Refusals
from control_plane.network.host import NetworkError
from control_plane.network.links import veth_of
from control_plane.network.policy import NetworkPolicy
from control_plane.providers.process import cgroups
from control_plane.providers.process.disks import DiskError, Disks
from control_plane.providers.process.isolation import HOME, READY_FILE, Command, Isolation
from control_plane.providers.process.spawn import filled_pipe, spawn
from control_plane.providers.process.template import Template, TemplateError
from control_plane.sandboxes.provider import (
    DEFAULT_LIMITS,
    PROJECT_DIR,
    Handle,
    Launch,
    Limits,
    Liveness,
    ProviderError,
    SandboxProvider,
    SandboxSpec,
    until_up,
)
from core import namespaces, processes
from launch.env import LaunchEnv
from launch.ready import MAX_BYTES as READY_BYTES
from launch.ready import Ready

logger = logging.getLogger(__name__)
T = TypeVar("T")

SPEC = SandboxSpec(
    id="process",
    description="an agent-server child process on this machine, "
    "in its own process group, sharing the host's tools (bash, git, Chromium)",
)


def isolated_spec(isolation: Isolation) -> SandboxSpec:
    return SandboxSpec(
        id=SPEC.id,
        description=f"{SPEC.description}; {isolation.described}: "
        "its own files, "
        f"/tmp and processes, the system read-only; its workspace at {PROJECT_DIR}",
        working_dir=PROJECT_DIR,
    )


#: What bubblewrap runs around a server forked from the template: it lives while its stdin is
#: open (the server's lifeline) and ignores SIGTERM, so a stop waits for the server itself. The
#: ready file's path is an argument, as a spawned server's is, so a restart finds it.
HOLDER = ["sh", "-c", "trap '' TERM; exec cat"]
LOG_FILE = "agent-server.log"
#: The agent server's port in a sandbox with a network namespace of its own.
PORT = 8000


def ready_marker(root_dir: Path) -> bytes:
    """The environment entry that marks a sandbox's processes (found again after a restart)."""
    return LaunchEnv(ready_file=str(root_dir / READY_FILE)).entries()[0].encode()


def child_env(
    launch: Launch, isolation: Isolation | None = None, own_network: bool = False
) -> dict[str, str]:
    """The control plane's own settings (its database, its secret key) never reach a sandbox:
    core's child environment withholds them; the sandbox's own go on top. Its keys are not
    among them: they come over the pipe on its stdin. `own_network`: the server listens on
    its namespace's addresses at a fixed port, not on a port of this host's loopback."""
    return processes.child_env(
        LaunchEnv(
            keys_fd=0,
            host="0.0.0.0" if own_network else "127.0.0.1",
            port=PORT if own_network else 0,
            state_dir=str(launch.root_dir / "state"),
            working_dir=PROJECT_DIR if isolation else str(launch.workspace),
            ready_file=str(launch.root_dir / READY_FILE),
            webhook_url=launch.webhook_url,
            log_level="warning",
        ).environment(),
        isolation.env(launch.root_dir) if isolation else {},
    )


class ProcessProvider(SandboxProvider):
    host_loopback = True  # its sandboxes are this machine's processes

    def __init__(
        self,
        archive_dir: Path,
        *,
        isolation: Isolation | None = None,
        template: Template | None = None,
        shared_host: bool = False,
        start_timeout: float = 60.0,
        stop_grace: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
        groups: cgroups.Cgroups | None = None,
        limits: Limits = DEFAULT_LIMITS,
        network: Boundary | None = None,
        disks: Disks | None = None,
    ) -> None:
        """`isolation`: bubblewrap's (`isolation.choose`), or None: sandboxes run as this
        process's user, and serve one user only unless `shared_host` accepts that. `template`:
        servers of isolated sandboxes are forked from it once it is ready. `groups`: where
        each sandbox gets a cgroup holding it to `limits` (`cgroups.find`; None: no limits).
        `network`: isolated sandboxes each get a network namespace behind it (None: they
        share this host's network). `disks`: isolated sandboxes each get a filesystem of
        their own (None: they share this host's disk)."""
        super().__init__(start_timeout=start_timeout, transport=transport)
        self.network = network if isolation is not None else None
        self.disks = disks if isolation is not None else None
        self.archive_dir = archive_dir
        self.isolation = isolation
        self.template = template
        self.groups, self.limits = groups, limits
        self.single_tenant = isolation is None and not shared_host
        self.stop_grace = stop_grace
        #: Children started by this process (`spawn`), reaped so they never linger as zombies.
        self._children: set[int] = set()

    def specs(self) -> list[SandboxSpec]:
        return [isolated_spec(self.isolation) if self.isolation else SPEC]

    async def start(self) -> None:
        if self.network is not None:
            await self.network.start()
        if self.template is not None:
            self.template.start()

    async def close(self) -> None:
        if self.template is not None:
            self.template.close()
        if self.network is not None:
            await self.network.close()
        await super().close()

    def inside(self, url: str) -> str:
        """Behind the boundary, this control plane is its gateway address on the segment, at
        its own port, whatever address it is known by elsewhere."""
        if self.network is None:
            return url
        parts = urlsplit(url)
        netloc = f"{self.network.gateway}:{self.network.fence.segment.port}"
        return urlunsplit(parts._replace(scheme="http", netloc=netloc))

    @property
    def sandbox_side(self) -> str | None:
        return None if self.network is None else str(self.network.gateway)

    def working_dir(self, root_dir: Path) -> Path:
        """Isolated: /workspace/project (bubblewrap binds the workspace there too); otherwise
        the workspace's own path on this machine."""
        return Path(PROJECT_DIR) if self.isolation is not None else root_dir / "workspace"

    async def create(self, launch: Launch) -> Handle:
        if launch.spec_id != SPEC.id:
            raise ProviderError(f"unknown sandbox spec {launch.spec_id!r}")
        launch.root_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.disks is not None:
            try:
                await asyncio.to_thread(self.disks.attach, launch.sandbox_id, launch.root_dir)
            except DiskError as exc:
                raise ProviderError(f"the sandbox's disk could not be made: {exc}") from None
        for path in (launch.root_dir, launch.root_dir / "state", launch.workspace):
            path.mkdir(exist_ok=True, mode=0o700)
        ready = launch.root_dir / READY_FILE
        ready.unlink(missing_ok=True)
        # -P: the working directory (the sandbox's own, which its agent writes) is not put
        # first on the import path, so nothing planted there is imported by the server.
        argv = [sys.executable, "-P", "-m", "agent_server", "--ready-file", str(ready)]
        env = child_env(launch, self.isolation, self.network is not None)
        command = Command(argv, {}, env)
        uid, groups = None, []
        if self.isolation is not None:
            (launch.root_dir / HOME).mkdir(exist_ok=True, mode=0o700)
            uid = await asyncio.to_thread(self.isolation.own, launch.root_dir)
        address = None
        if self.network is not None:
            try:
                address = (await self.network.attach(launch.sandbox_id, launch.network)).address
            except NetworkError as exc:
                raise ProviderError(f"the sandbox's network could not be made: {exc}") from None
        try:
            if self.isolation is not None:
                command = self._command(launch, argv, uid, env)
            if self.groups is not None:
                groups = await asyncio.to_thread(self.groups.create, launch.sandbox_id, self.limits)
            return await self._launch(launch, command, uid, groups, address)
        except BaseException:
            if self.network is not None:
                await self.network.detach(launch.sandbox_id)
            raise

    def _command(
        self, launch: Launch, argv: list[str], uid: int | None, env: dict[str, str]
    ) -> Command:
        """`argv` in the sandbox: bubblewrap's namespaces, entered in its network namespace
        first when it has one (where it asks the control plane's resolver)."""
        assert self.isolation is not None
        links = None if self.network is None else self.network.links
        command = self.isolation.command(
            launch.root_dir, argv, uid, env, None if links is None else links.resolv_conf()
        )
        if links is None:
            return command
        return Command([*links.enter(launch.sandbox_id), *command.argv], command.files, command.env)

    async def _launch(
        self,
        launch: Launch,
        command: Command,
        uid: int | None,
        groups: list[Path],
        address: ipaddress.IPv4Address | None,
    ) -> Handle:
        ready = launch.root_dir / READY_FILE
        out = os.open(launch.root_dir / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        said: int | None = None  # a forked server says it is ready on this pipe
        try:
            pid = None
            if self.template is not None:
                self.template.revive()
            if (
                uid is not None
                and self.template is not None
                and self.template.ready
                and self.isolation is not None
                and not self.isolation.own_kernel
            ):
                try:
                    pid, said = await self._fork(launch, uid, out, groups, command.env)
                except TemplateError as exc:
                    logger.warning("%s; the server is started by itself", exc)
            if pid is None:
                pid = self._spawn(command, launch, out, launch.keys(), groups)
        finally:
            os.close(out)
        try:
            if said is not None:
                port = await self._said_ready(said, launch.root_dir / LOG_FILE)
            else:
                port = await self._wait_ready(pid, ready, launch.root_dir / LOG_FILE)
            started = processes.start_time(pid)
            if started is None:
                raise ProviderError("the agent server exited right after starting")
            handle = Handle(
                sandbox_id=launch.sandbox_id,
                pid=pid,
                pid_start_time=started,
                port=port,
                host=Handle.host if address is None else str(address),
            )
            if said is None:  # a ready file's port is checked; a pipe's came from our server,
                await self._wait_alive(pid, handle)  # which said so once it answers
            return handle
        except BaseException:
            await self._kill_now(pid)
            raise
        finally:
            if said is not None:
                os.close(said)

    def _spawn(
        self, command: Command, launch: Launch, out: int, stdin: bytes | int, groups: list[Path]
    ) -> int:
        pid = spawn(
            cgroups.enter(groups, command.argv),
            command.env,
            output=out,
            stdin=stdin,
            files=command.files,
        )
        self._children.add(pid)
        return pid

    async def _fork(
        self, launch: Launch, uid: int, out: int, groups: list[Path], env: dict[str, str]
    ) -> tuple[int, int]:
        """bubblewrap makes the sandbox around a holder, and the template forks the server
        into it (`agent_server.template`): bubblewrap's pid, as a spawned server's, and the
        read end of the pipe the server says it is ready on."""
        assert self.isolation is not None and self.template is not None
        ready = str(launch.root_dir / READY_FILE)
        command = self._command(launch, [*HOLDER, ready], uid, env)
        lifeline, held = os.pipe()
        said, says = os.pipe()
        keys = filled_pipe(launch.keys())
        try:
            pid = self._spawn(command, launch, out, lifeline, groups)
            try:
                inside = await self._made(pid, launch.root_dir / LOG_FILE)
                await self.template.fork(
                    enter=inside,
                    uid=uid,
                    cwd=launch.root_dir,
                    env=env,
                    argv=["--ready-file", ready],
                    fds=[keys, out, held, says],
                    cgroups=groups,
                    seccomp=self.isolation.seccomp,
                )
            except BaseException:
                os.close(said)
                await self._kill_now(pid)
                raise
            return pid, said
        finally:
            for fd in (lifeline, held, says, keys):
                os.close(fd)

    async def _made(self, pid: int, log: Path) -> int:
        """bubblewrap's pid 1 once the sandbox is made (its mounts are ready before pid 1
        starts the holder)."""

        async def look() -> int | None:
            if (status := self._reap(pid)) is not None:
                raise ProviderError(f"bubblewrap exited with status {status}: {_tail(log)}")
            return next(
                (inner for inner in processes.children(pid) if processes.children(inner)), None
            )

        return await until_up(
            look,
            within=self.start_timeout,
            interval=0.005,
            late=f"the sandbox was not made within {self.start_timeout:g} s",
        )

    async def _said_ready(self, said: int, log: Path) -> int:
        """The port a forked server listens on, once it says so on its ready pipe (no
        polling: the loop wakes when it writes, or when it ends, which closes the pipe)."""
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(said, wake)
        try:
            await asyncio.wait_for(readable, self.start_timeout)
        except TimeoutError:
            raise ProviderError(
                f"the agent server did not start within {self.start_timeout:g} s"
            ) from None
        finally:
            loop.remove_reader(said)
        try:
            return Ready.decode(os.read(said, READY_BYTES)).port
        except (OSError, ValueError):
            raise ProviderError(
                f"the agent server exited before it was ready: {_tail(log)}"
            ) from None

    async def _wait_ready(self, pid: int, ready: Path, log: Path) -> int:
        async def look() -> int | None:
            if (status := self._reap(pid)) is not None:
                raise ProviderError(f"the agent server exited with status {status}: {_tail(log)}")
            try:
                said = Ready.read(ready)
            except (OSError, ValueError):
                return None
            # Isolated, the server knows its pid in its own namespace only.
            return said.port if said.pid == pid or self.isolation is not None else None

        late = f"the agent server did not start within {self.start_timeout:g} s"
        return await until_up(look, within=self.start_timeout, interval=0.01, late=late)

    async def _wait_alive(self, pid: int, handle: Handle) -> None:
        async def look() -> bool | None:
            if (status := self._reap(pid)) is not None:
                raise ProviderError(f"the agent server exited with status {status}")
            return True if await self.alive(handle) else None

        late = f"the agent server did not answer /alive within {self.start_timeout:g} s"
        await until_up(look, within=self.start_timeout, interval=0.02, late=late)

    async def recover(self, launch: Launch) -> Handle | None:
        """The child of a start that was cut short: its handle once it is up; a child still
        booting (no ready file yet) is killed, so the caller can start the sandbox again."""
        marker = (
            self.isolation.marker(launch.root_dir)
            if self.isolation is not None
            else str(launch.root_dir / READY_FILE)
        )
        found = processes.with_argument(marker)
        leaders = [p.pid for p in found if p.pid == p.pgid]
        try:
            port = Ready.read(launch.root_dir / READY_FILE).port
        except (OSError, ValueError):
            port = 0
        started = processes.start_time(leaders[0]) if port and len(leaders) == 1 else None
        host: str | None = Handle.host
        if self.network is not None and self.network.links is not None:
            address = await self.network.links.address_of(launch.sandbox_id)
            host = None if address is None else str(address)
        if started is not None and host is not None:
            return Handle(
                sandbox_id=launch.sandbox_id,
                pid=leaders[0],
                pid_start_time=started,
                port=port,
                host=host,
            )
        for group in {p.pgid for p in found}:
            processes.signal_group(group, signal.SIGKILL)
        if self.network is not None:
            await self.network.detach(launch.sandbox_id)
        return None

    def _reap(self, pid: int) -> int | None:
        """The exit status of our child `pid` when it has just ended (and is reaped now)."""
        if pid not in self._children:
            return None
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 0
        if done == 0:
            return None
        self._children.discard(pid)
        return os.waitstatus_to_exitcode(status)

    async def inspect(self, handle: Handle) -> Liveness:
        self._reap(handle.pid)
        if not processes.is_running(handle.pid, handle.pid_start_time):
            return Liveness.GONE
        if processes.state(handle.pid) == "T":
            return Liveness.STOPPED
        return Liveness.ALIVE if await self.alive(handle) else Liveness.UNRESPONSIVE

    async def pause(self, handle: Handle) -> None:
        """Returns once the server is stopped: a signal lands asynchronously, and PAUSED is
        only stored when it is true. A kernel of its own (gVisor's) stops the sandbox first;
        the launcher's group is stopped too, which is how a paused sandbox is known again."""
        if self.isolation is not None:
            await self.isolation.pause(handle.pid)
        self._signal(handle, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while processes.state(handle.pid) != "T" or self._running_inside(handle):
            if time.monotonic() > deadline or not processes.is_running(
                handle.pid, handle.pid_start_time
            ):
                raise ProviderError("the agent server did not stop")
            await asyncio.sleep(0.005)

    async def resume(self, handle: Handle) -> Handle:
        self._signal(handle, signal.SIGCONT)
        if self.isolation is not None:
            await self.isolation.resume(handle.pid)
        await self.until_alive(
            handle,
            "the agent server did not answer after resuming",
            lambda: processes.is_running(handle.pid, handle.pid_start_time),
        )
        return handle

    def _signal(self, handle: Handle, sig: signal.Signals) -> None:
        if not processes.is_running(
            handle.pid, handle.pid_start_time
        ) or not processes.signal_group(handle.pid, sig):
            raise ProviderError("the sandbox's process is gone")
        self._signal_inside(handle, sig)

    def _namespace(self, handle: Handle) -> str | None:
        """An isolated sandbox's pid namespace: what runs in it is the sandbox's, whatever its
        group (a server forked from the template leads a session of its own). None on a
        kernel of its own: nothing of the sandbox is a process of this host."""
        if self.isolation is None or self.isolation.own_kernel:
            return None
        ours = namespaces.namespace(os.getpid())
        for pid in processes.group_members(handle.pid):
            if (inside := namespaces.namespace(pid)) not in (None, ours):
                return inside
        return None

    def _signal_inside(self, handle: Handle, sig: signal.Signals) -> None:
        if (inside := self._namespace(handle)) is not None:
            namespaces.signal_all(inside, sig)

    def _running_inside(self, handle: Handle) -> bool:
        """Some process of the sandbox is not stopped yet (one forked meanwhile is stopped now)."""
        if (inside := self._namespace(handle)) is None:
            return False
        running = [
            p for p in namespaces.members(inside) if processes.state(p) not in ("T", "t", "Z", None)
        ]
        for pid in running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        return bool(running)

    async def destroy(self, sandbox_id: str, handle: Handle | None, root_dir: Path) -> Path | None:
        if handle is not None and processes.holds_group(handle.pid, handle.pid_start_time):
            # Taken while the server lives: its shells run in sessions of their own, and once
            # it is gone nothing links them to it any more.
            tree = (
                await asyncio.to_thread(
                    _sweep, processes.started_by, handle.pid, ready_marker(root_dir)
                )
                or set()
            )
            # Isolated, bubblewrap (the leader, which SIGTERM ends at once, and its pid 1,
            # which waits for everything of the sandbox) is not what is waited for: the server
            # has stopped when nothing else of the group is left.
            launcher = (
                {handle.pid, *processes.children(handle.pid)}
                if self.isolation is not None
                else set()
            )
            # A stopped group only acts on SIGTERM once continued.
            inside = self._namespace(handle)
            if self.isolation is not None and self.isolation.own_kernel:
                # On a kernel of its own the launcher (runsc) and its children are all there
                # is of it on this host, and they are waited for; its sandbox process leads a
                # session of its own, so it is killed by name at the end.
                tree |= set(processes.children(handle.pid))
                launcher = set()
            processes.signal_group(handle.pid, signal.SIGCONT)
            if inside is not None:
                namespaces.signal_all(inside, signal.SIGCONT)
            if self.isolation is None or not await self.isolation.terminate(handle.pid):
                processes.signal_group(handle.pid, signal.SIGTERM)
                if inside is not None:
                    namespaces.signal_all(inside, signal.SIGTERM)
            deadline = time.monotonic() + self.stop_grace
            while time.monotonic() < deadline:
                self._reap(handle.pid)
                if not set(processes.group_members(handle.pid)) - launcher:
                    break
                await asyncio.sleep(0.02)
            # Whatever is left goes now: the group (with bubblewrap's pid 1, the whole pid
            # namespace), and what its processes started in sessions of their own (the
            # terminal's shells), found by core's /proc sweep.
            processes.signal_group(handle.pid, signal.SIGKILL)
            if inside is not None:
                namespaces.signal_all(inside, signal.SIGKILL)
            for pid in tree:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            await asyncio.to_thread(_sweep, processes.kill_tree, handle.pid, ready_marker(root_dir))
            for _ in range(500):  # no zombie left behind: SIGKILL takes a moment to land
                self._reap(handle.pid)
                if handle.pid not in self._children:
                    break
                await asyncio.sleep(0.01)
        if self.network is not None:
            try:
                await self.network.detach(sandbox_id)
            except NetworkError as exc:
                raise ProviderError(f"the sandbox's network could not be removed: {exc}") from None
        return await asyncio.to_thread(self._archive_and_remove, sandbox_id, root_dir)

    async def set_network(self, handle: Handle, policy: NetworkPolicy) -> bool:
        if self.network is None or handle.host == Handle.host:
            return False
        address = ipaddress.IPv4Address(handle.host)
        try:
            await self.network.admit(handle.sandbox_id, address, veth_of(address), policy)
        except NetworkError as exc:
            raise ProviderError(str(exc)) from None
        return True

    async def refusals(self, handle: Handle) -> Refusals | None:
        if self.network is None or handle.host == Handle.host:
            return None
        try:
            return await self.network.refusals(
                handle.sandbox_id, ipaddress.IPv4Address(handle.host)
            )
        except NetworkError as exc:
            raise ProviderError(str(exc)) from None

    def disk(self, root_dir: Path) -> DiskUsage | None:
        return None if self.disks is None else self.disks.usage(root_dir)

    def _archive_and_remove(self, sandbox_id: str, root_dir: Path) -> Path | None:
        archive: Path | None = None
        workspace = root_dir / "workspace"
        if workspace.is_dir():
            self.archive_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            archive = self.archive_dir / f"{sandbox_id}.tar.gz"
            partial = archive.with_suffix(".partial")
            with tarfile.open(partial, "w:gz") as tar:
                tar.add(workspace, arcname=sandbox_id)
            os.chmod(partial, 0o600)
            os.replace(partial, archive)
        if self.disks is not None:
            try:
                self.disks.detach(sandbox_id, root_dir)
            except DiskError as exc:
                raise ProviderError(f"the sandbox's disk could not be removed: {exc}") from None
        shutil.rmtree(root_dir, ignore_errors=True)
        if self.isolation is not None:
            self.isolation.remove(root_dir)
        if self.groups is not None:
            self.groups.remove(sandbox_id)
        return archive

    async def _kill_now(self, pid: int) -> None:
        """A start that failed or was cancelled: nothing of it is left (it dies in moments; the
        wait for it yields, so other sandboxes' work goes on meanwhile)."""
        processes.signal_group(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while pid in self._children and time.monotonic() < deadline:
            self._reap(pid)
            await asyncio.sleep(0.005)


def _sweep(scan: Callable[[int, bytes], T], leader: int, tag: bytes) -> T | None:
    """core's /proc scans, tried again when a process ending mid-read trips them (a stat file
    read empty raises ValueError there)."""
    for _ in range(3):
        try:
            return scan(leader, tag)
        except ValueError:
            continue
    logger.warning("could not sweep the processes of sandbox process %d", leader)
    return None


def _tail(log: Path, size: int = 2000) -> str:
    try:
        return log.read_bytes()[-size:].decode(errors="replace").strip()
    except OSError:
        return "(no log)"
