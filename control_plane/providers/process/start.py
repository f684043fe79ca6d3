"""A process sandbox's start: its place made, its agent server spawned or forked, and waited
for until it answers.

The place first: the sandbox's directories (on a filesystem of its own where there are
disks), its uid, its network namespace and its cgroups. Then the server: forked from the
template into the namespaces bubblewrap made around a holder, when the template is ready
(starts in moments, sandboxes smaller), or else spawned as bubblewrap's command (or by itself,
without isolation). Then the wait, which is each way's own: a forked server says its port on a
pipe the loop wakes on; a spawned one writes its ready file, and its port is asked /alive.

A start that fails or is cancelled at any step leaves nothing running: its launcher is killed
and reaped, and its network namespace detached.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from control_plane.providers.disks import DiskError, Disks
from control_plane.providers.process import cgroups
from control_plane.providers.process.children import Children
from control_plane.providers.process.environment import child_env
from control_plane.providers.process.isolation import HOME, READY_FILE, Command, Isolation
from control_plane.providers.process.leader import Leader
from control_plane.providers.process.network import ProcessNetwork
from control_plane.providers.process.settings import ProcessSettings
from control_plane.providers.process.spawn import filled_pipe
from control_plane.providers.process.template import Template, TemplateError
from control_plane.sandboxes.provider import Handle, Launch, ProviderError, until_up
from core import processes
from launch.ready import MAX_BYTES as READY_BYTES
from launch.ready import Ready

logger = logging.getLogger(__name__)

#: What bubblewrap runs around a server forked from the template: it lives while its stdin is
#: open (the server's lifeline) and ignores SIGTERM, so a stop waits for the server itself. The
#: ready file's path is an argument, as a spawned server's is, so a restart finds it.
HOLDER = ["sh", "-c", "trap '' TERM; exec cat"]
LOG_FILE = "agent-server.log"


@dataclass(frozen=True)
class Place:
    """A sandbox's place, made for its server (`Starter.place`)."""

    command: Command
    """Its server's command there: a spawned server's, and a forked one's environment."""
    uid: int | None
    """Its own user, where it is isolated."""
    groups: list[Path]
    """Its cgroups, where it has some."""
    address: ipaddress.IPv4Address | None
    """Its network namespace's address, behind the boundary."""


@dataclass
class Waiting:
    """A parked server (`Starter.park`): forked into its sandbox, waiting for its keys."""

    pid: int
    """The sandbox's launcher (bubblewrap), which leads its process group."""
    keys: int
    """The write end of the pipe its keys come on. Closed unused (its control plane gone),
    the server reads no keys and exits, and its sandbox with it."""
    said: int
    """The read end of the pipe it says its port on, once it has its keys and listens."""
    address: ipaddress.IPv4Address | None

    def hand_over(self, keys: bytes) -> None:
        """Its keys written whole (a few hundred bytes: the pipe's buffer holds them), the
        pipe closed; ProviderError when the server is gone."""
        try:
            with os.fdopen(os.dup(self.keys), "wb") as pipe:
                pipe.write(keys)
        except OSError as exc:
            raise ProviderError(f"the parked server did not take its keys: {exc}") from None
        finally:
            self.keys = _closed(self.keys)

    def close(self) -> None:
        self.keys, self.said = _closed(self.keys), _closed(self.said)


class Starter:
    """Starts sandboxes' servers with the parts of this host the provider was given."""

    def __init__(
        self,
        settings: ProcessSettings,
        children: Children,
        alive: Callable[[Handle], Awaitable[bool]],
        *,
        isolation: Isolation | None,
        template: Template | None,
        groups: cgroups.Cgroups | None,
        network: ProcessNetwork | None,
        disks: Disks | None,
    ) -> None:
        """`alive`: whether a handle's server answers /alive (the provider's probe)."""
        self.start_timeout = settings.start_timeout
        self.limits = settings.limits
        self.traces_url = settings.traces_url
        self.children = children
        self.alive = alive
        self.isolation = isolation
        self.template = template
        self.groups = groups
        self.network = network
        self.disks = disks

    async def create(self, launch: Launch) -> Handle:
        """The sandbox `launch` describes, started: its handle once its server answers."""
        place = await self.place(launch)
        try:
            return await self._launch(launch, place)
        except BaseException:
            await self.unplace(launch)
            raise

    async def place(self, launch: Launch) -> Place:
        """Its directories (on its own disk), its uid, its network namespace (let in under
        `launch.network`) and its cgroups: what its server is started with there. What a
        start cut short earlier left is taken up. The network is made while the disk is
        (each about 25-40 ms of commands, waited for, not computed); a failure of either
        stops the other and takes the network back."""
        launch.root_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        address = None
        try:
            async with asyncio.TaskGroup() as group:
                owned = group.create_task(self._files(launch))
                if self.network is not None:
                    attached = group.create_task(
                        self.network.attach(launch.sandbox_id, launch.network)
                    )
            uid = owned.result()
            if self.network is not None:
                address = attached.result()
        except BaseExceptionGroup as group_error:
            await self.unplace(launch)
            # The failure itself (a start's error in its own words first), not a group.
            failed = group_error.subgroup(ProviderError) or group_error
            raise failed.exceptions[0] from None
        # -P: the working directory (the sandbox's own, which its agent writes) is not put
        # first on the import path, so nothing planted there is imported by the server.
        argv = [sys.executable, "-P", "-m", "agent_server", "--ready-file", str(ready_of(launch))]
        env = child_env(launch, self.isolation, self.network is not None, self.traces_url)
        command = Command(argv, {}, env)
        groups: list[Path] = []
        try:
            if self.isolation is not None:
                command = self._command(launch, argv, uid, env)
            if self.groups is not None:
                groups = await asyncio.to_thread(self.groups.create, launch.sandbox_id, self.limits)
        except BaseException:
            await self.unplace(launch)
            raise
        return Place(command, uid, groups, address)

    async def _files(self, launch: Launch) -> int | None:
        """Its disk, mounted, with its directories, and its uid (None: not isolated)."""
        if self.disks is not None:
            try:
                await asyncio.to_thread(self.disks.attach, launch.sandbox_id, launch.root_dir)
            except DiskError as exc:
                raise ProviderError(f"the sandbox's disk could not be made: {exc}") from None
        for path in (launch.root_dir, launch.root_dir / "state", launch.workspace):
            path.mkdir(exist_ok=True, mode=0o700)
        ready_of(launch).unlink(missing_ok=True)
        if self.isolation is None:
            return None
        (launch.root_dir / HOME).mkdir(exist_ok=True, mode=0o700)
        return await asyncio.to_thread(self.isolation.own, launch.root_dir)

    async def unplace(self, launch: Launch) -> None:
        """What a failed start made that a next one would not take up: its network namespace
        (its files and cgroups are taken up again, or removed with the sandbox)."""
        if self.network is not None:
            await self.network.detach(launch.sandbox_id)

    @property
    def forks(self) -> bool:
        """Whether servers are forked from the template now (it is ready)."""
        if self.template is not None:
            self.template.revive()
        return (
            self.template is not None
            and self.template.ready
            and self.isolation is not None
            and not self.isolation.own_kernel
        )

    async def park(self, launch: Launch) -> Waiting:
        """A server forked into the place `launch` describes, with no keys on its pipe yet:
        it has loaded everything and waits for them (`hand_over`). ProviderError when the
        template does not fork."""
        if not self.forks:
            raise ProviderError("servers are parked only where the sandbox template forks them")
        place = await self.place(launch)
        try:
            if place.uid is None:
                raise ProviderError("a parked server needs a uid of its own")
            keys_read, keys = os.pipe()
            try:
                with _output(launch) as out:
                    pid, said = await self._fork(launch, place, out, keys_read)
            except BaseException:
                os.close(keys)
                raise
            finally:
                os.close(keys_read)
        except BaseException:
            await self.unplace(launch)
            raise
        return Waiting(pid=pid, keys=keys, said=said, address=place.address)

    async def claimed(self, launch: Launch, waiting: Waiting) -> Handle:
        """The handle of a parked server handed its keys, once it answers (killed, if it does
        not)."""
        try:
            return await self._handle(launch, waiting.pid, waiting.said, waiting.address)
        finally:
            waiting.close()

    def _command(
        self, launch: Launch, argv: list[str], uid: int | None, env: dict[str, str]
    ) -> Command:
        """`argv` in the sandbox: bubblewrap's namespaces, entered in its network namespace
        first when it has one (where it asks the control plane's resolver)."""
        assert self.isolation is not None
        resolv_conf = None if self.network is None else self.network.resolv_conf()
        command = self.isolation.command(launch.root_dir, argv, uid, env, resolv_conf)
        return command if self.network is None else self.network.enter(launch.sandbox_id, command)

    async def _launch(self, launch: Launch, place: Place) -> Handle:
        """The server forked from the template where it can be, else spawned; its handle once
        it answers (killed, if it does not)."""
        said: int | None = None  # a forked server says it is ready on this pipe
        with _output(launch) as out:
            pid = None
            if place.uid is not None and self.forks:
                keys = filled_pipe(launch.keys())
                try:
                    pid, said = await self._fork(launch, place, out, keys)
                except TemplateError as exc:
                    logger.warning("%s; the server is started by itself", exc)
                finally:
                    os.close(keys)
            if pid is None:
                pid = self.children.spawn(
                    place.command, output=out, stdin=launch.keys(), groups=place.groups
                )
        try:
            return await self._handle(launch, pid, said, place.address)
        finally:
            if said is not None:
                os.close(said)

    async def _handle(
        self, launch: Launch, pid: int, said: int | None, address: ipaddress.IPv4Address | None
    ) -> Handle:
        """The started server's handle once it answers: a forked one says its port on the
        pipe `said`, a spawned one in its ready file. It is killed when it does not answer."""
        log = launch.root_dir / LOG_FILE
        try:
            if said is not None:
                port = await self._said_ready(said, log)
            else:
                port = await self._wait_ready(pid, ready_of(launch), log)
            started = processes.start_time(pid)
            if started is None:
                raise ProviderError("the agent server exited right after starting")
            handle = Handle(
                sandbox_id=launch.sandbox_id,
                ref=Leader(pid=pid, started=started).ref,
                port=port,
                host=Handle.host if address is None else str(address),
            )
            if said is None:  # a ready file's port is checked; a pipe's came from our server,
                await self._wait_alive(pid, handle)  # which said so once it answers
            return handle
        except BaseException:
            await self.children.kill_now(pid)
            raise

    async def _fork(self, launch: Launch, place: Place, out: int, keys: int) -> tuple[int, int]:
        """bubblewrap makes the sandbox around a holder, and the template forks the server
        into it (`agent_server.template`), `keys` its stdin: bubblewrap's pid, as a spawned
        server's, and the read end of the pipe the server says it is ready on."""
        assert self.isolation is not None and self.template is not None
        assert place.uid is not None
        ready = str(ready_of(launch))
        env = place.command.env
        command = self._command(launch, [*HOLDER, ready], place.uid, env)
        lifeline, held = os.pipe()
        said, says = os.pipe()
        try:
            pid = self.children.spawn(command, output=out, stdin=lifeline, groups=place.groups)
            try:
                inside = await self._made(pid, launch.root_dir / LOG_FILE)
                await self.template.fork(
                    enter=inside,
                    uid=place.uid,
                    cwd=launch.root_dir,
                    env=env,
                    argv=["--ready-file", ready],
                    fds=[keys, out, held, says],
                    cgroups=place.groups,
                    seccomp=self.isolation.seccomp,
                )
            except BaseException:
                os.close(said)
                await self.children.kill_now(pid)
                raise
            return pid, said
        finally:
            for fd in (lifeline, held, says):
                os.close(fd)

    async def _made(self, pid: int, log: Path) -> int:
        """bubblewrap's pid 1 once the sandbox is made (its mounts are ready before pid 1
        starts the holder)."""

        async def look() -> int | None:
            if (status := self.children.reap(pid)) is not None:
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
        """The port a spawned server listens on, once its ready file says so (polled: a
        spawned server has no pipe to say it on)."""

        async def look() -> int | None:
            if (status := self.children.reap(pid)) is not None:
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
        """Returns once the server answers /alive on the port its ready file named
        (ProviderError when it ends first)."""

        async def look() -> bool | None:
            if (status := self.children.reap(pid)) is not None:
                raise ProviderError(f"the agent server exited with status {status}")
            return True if await self.alive(handle) else None

        late = f"the agent server did not answer /alive within {self.start_timeout:g} s"
        await until_up(look, within=self.start_timeout, interval=0.02, late=late)


def ready_of(launch: Launch) -> Path:
    return launch.root_dir / READY_FILE


@contextlib.contextmanager
def _output(launch: Launch) -> Iterator[int]:
    """The server's log, open for appending while it is started (it keeps its own copy)."""
    out = os.open(launch.root_dir / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        yield out
    finally:
        os.close(out)


def _closed(fd: int) -> int:
    """-1, once `fd` is closed (where it was open)."""
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)
    return -1


def _tail(log: Path, size: int = 2000) -> str:
    """The end of the server's log, for the message of a start that failed."""
    try:
        return log.read_bytes()[-size:].decode(errors="replace").strip()
    except OSError:
        return "(no log)"
