"""The SandboxProvider interface: what every kind of sandbox (process, container, pod) offers.

The control plane never branches on which provider it has. A provider knows nothing of users,
rows or HTTP routes: it starts an agent server with the environment it is given, says whether
it is still there, stops and continues it, and destroys it (archiving the workspace first).
"""

from __future__ import annotations

import abc
import asyncio
import enum
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, TypeVar

import httpx

from control_plane.config import Config
from control_plane.models import DiskUsage
from control_plane.network.fence import Refusals
from control_plane.network.policy import OPEN, NetworkPolicy
from launch.keys import Keys


class ProviderError(Exception):
    """A sandbox could not be created or driven; the message says why (shown as status_detail)."""


class Refused(ProviderError):
    """The sandbox is intact but cannot do this now (a cluster's node it lives on is down):
    nothing changed, and it is not to be taken for broken; the message says why."""


@dataclass(frozen=True)
class SandboxSpec:
    """A template for sandboxes (SPEC 2.4)."""

    id: str
    description: str
    """What a sandbox made from it is."""
    working_dir: str | None = None
    """The workspace as the sandbox's processes see it, the same in every sandbox of the spec
    (`/workspace/project`, where OpenHands clients expect it); None when it differs from one
    sandbox to the next (`SandboxProvider.working_dir` says where)."""


#: Where OpenHands clients (the Cloud workspace, the web frontend) expect the workspace.
PROJECT_DIR = "/workspace/project"


@dataclass(frozen=True)
class Limits:
    """What one sandbox may use (a container's limits; a process sandbox's cgroups)."""

    memory: int = 4 * 1024**3
    """Bytes."""
    cpus: float = 2.0
    pids: int = 1024

    @classmethod
    def of(cls, config: Config) -> Limits:
        """The deployment's limits for each sandbox, whatever its provider."""
        return cls(
            memory=int(config.sandbox_memory_limit),
            cpus=config.sandbox_cpu_limit,
            pids=config.sandbox_pids_limit,
        )

    # A tmpfs's pages are the sandbox's memory, held by no process: were they to fill it, the
    # kernel would end the largest process left, the agent server. So the sandbox's tmpfs
    # mounts together take at most half its memory, and the server keeps its room.
    @property
    def tmp(self) -> int:
        """Bytes of the sandbox's /tmp: a quarter of its memory, 1 GiB at most."""
        return min(1024**3, self.memory // 4)

    @property
    def home(self) -> int:
        """Bytes of a container's home (a tmpfs): an eighth of its memory, 256 MiB at most."""
        return min(256 * 1024**2, self.memory // 8)

    @property
    def shm(self) -> int:
        """Bytes of the sandbox's /dev/shm: an eighth of its memory, 64 MiB at most."""
        return min(64 * 1024**2, self.memory // 8)


DEFAULT_LIMITS = Limits()


class StoredHandle(TypedDict):
    """A handle as the sandbox row keeps it (`Handle.stored`)."""

    ref: str
    port: int
    host: str | None


@dataclass(frozen=True)
class Handle:
    """What the provider needs to find a sandbox again, stored so a restarted control plane can.

    The domain keeps it, stores it and hands it back; it reaches the agent server at `host` and
    `port`, and never looks inside `ref`: that is the kind's, made and read by the kind alone,
    so a kind whose sandboxes are not processes does not have to dress its own key up as one.
    """

    sandbox_id: str
    """The sandbox's id (a container provider names its container and volume after it)."""
    ref: str
    """What the kind needs to find this sandbox again and to tell it from another that reused
    its pid or its name; each kind's provider says its shape (a process's "pid:start time",
    a container's id, a Swarm service's id)."""
    port: int
    """The port the agent server answers on."""
    host: str = "127.0.0.1"
    """The address that port is published on: loopback for a sandbox of this machine, its
    node's address for a sandbox of a cluster."""

    def stored(self) -> StoredHandle:
        """The sandbox row's fields that keep it (the host only when not loopback)."""
        return {
            "ref": self.ref,
            "port": self.port,
            "host": None if self.host == Handle.host else self.host,
        }


class Liveness(enum.Enum):
    ALIVE = "alive"
    """The agent server answers /alive."""
    STOPPED = "stopped"
    """The process group is stopped (paused)."""
    UNRESPONSIVE = "unresponsive"
    """The process is there but does not answer."""
    GONE = "gone"
    """No such process (or the pid now belongs to another)."""


@dataclass(frozen=True)
class Health:
    """A health check's answer, with the provider's words for it when it has them (the node
    that left, the task that failed): they go into the sandbox's status_detail."""

    liveness: Liveness
    detail: str | None = None


@dataclass(frozen=True)
class Launch:
    """Everything a provider is told to start one sandbox."""

    sandbox_id: str
    spec_id: str
    root_dir: Path
    """The sandbox's own directory (`SandboxProvider.root_dir`): agent-server state, workspace,
    logs."""
    session_api_key: str
    webhook_url: str
    """Base of this control plane's webhook; the agent server appends /events/{id}."""
    webhook_secret: str | None = None
    """What the agent server signs its webhook deliveries with (it never sends its session key
    to the webhook then)."""
    network: NetworkPolicy = OPEN
    """Its egress policy (where the provider has a network boundary)."""
    network_url: str | None = None
    """Where its agent server reads what its policy refused it (with `token`)."""
    token: str | None = None
    """Its own credential towards this control plane's sandbox-side routes."""

    @property
    def workspace(self) -> Path:
        return self.root_dir / "workspace"

    def keys(self) -> bytes:
        """What the agent server reads from the pipe its launch environment names
        (`launch.keys`): its keys reach it there, never through an environment, argv or file a
        process of the sandbox could read (agent_server.secrecy)."""
        signed = bool(self.webhook_secret)
        reached = bool(self.network_url and self.token)
        return Keys(
            session_api_key=self.session_api_key,
            webhook_secret=self.webhook_secret if signed else None,
            webhook_sender=self.sandbox_id if signed else None,
            network_url=self.network_url if reached else None,
            network_token=self.token if reached else None,
        ).encode()


T = TypeVar("T")


async def until_up(
    look: Callable[[], Awaitable[T | None]],
    *,
    within: float,
    interval: float,
    late: str | Callable[[], str],
) -> T:
    """The one wait of every kind for a sandbox coming up: `look()` (a platform probe and
    /alive, in the kind's order) until it gives something, every `interval` seconds;
    ProviderError with `late` (or what `late()` says then) once `within` seconds have passed.
    A look that finds the sandbox failed raises its own ProviderError, which ends the wait."""
    deadline = time.monotonic() + within
    while True:
        found = await look()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise ProviderError(late if isinstance(late, str) else late())
        await asyncio.sleep(interval)


class SandboxProvider(abc.ABC):
    single_tenant: bool = False
    """Its sandboxes could read each other's files and this control plane's state (no
    isolation here): sandboxes are for one user only, the first to have had one."""
    host_loopback: bool = False
    """Its sandboxes run on this machine, where its loopback is a user's to name as an LLM's
    address (a model server beside the control plane): the control plane may call it for
    them (`control_plane.llm.refused_target`). A container's or a node's loopback is not this
    machine's, so only the process kind says True."""

    def __init__(
        self, *, start_timeout: float, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.start_timeout = start_timeout
        self._http = httpx.AsyncClient(timeout=2.0, transport=transport)

    async def alive(self, handle: Handle) -> bool:
        """Whether its agent server answers /alive: the health check of every kind of sandbox."""
        try:
            response = await self._http.get(self.url(handle) + "/alive")
            return response.status_code == 200
        except httpx.HTTPError:
            return False
        except AttributeError:
            # A connection closed by the other end as it was made: anyio then asks its
            # transport, closed already, for the socket's peer, and gets None (seen with a
            # Swarm task's published port coming up). Nothing answered: not alive yet.
            return False

    async def until_alive(
        self, handle: Handle, failure: str, still_there: Callable[[], bool] = lambda: True
    ) -> None:
        """Returns once its agent server answers; ProviderError(`failure`) when it does not
        within the start timeout or `still_there()` says it is gone."""

        async def look() -> bool | None:
            if await self.alive(handle):
                return True
            if not still_there():
                raise ProviderError(failure)
            return None

        await until_up(look, within=self.start_timeout, interval=0.02, late=failure)

    @abc.abstractmethod
    def specs(self) -> list[SandboxSpec]:
        """The templates this provider can start."""

    @abc.abstractmethod
    async def create(self, launch: Launch) -> Handle:
        """Start the sandbox and return once its agent server answers (ProviderError otherwise)."""

    @abc.abstractmethod
    async def inspect(self, handle: Handle) -> Liveness:
        """A health check, never the scheduler's view alone."""

    async def health(self, handle: Handle) -> Health:
        """`inspect`, and why when the provider can say (a cluster's node down, a task ended)."""
        return Health(await self.inspect(handle))

    @abc.abstractmethod
    async def pause(self, handle: Handle) -> None:
        """Release its CPU, keep its memory and files."""

    @abc.abstractmethod
    async def resume(self, handle: Handle) -> Handle:
        """Continue a paused sandbox; the handle it answers under from now on (the same one
        for a frozen process or container; a cluster's new task may differ). `Refused` when it
        cannot be resumed now but is intact."""

    @abc.abstractmethod
    async def destroy(self, sandbox_id: str, handle: Handle | None, root_dir: Path) -> Path | None:
        """Stop it for good, archive its workspace where no route serves it, remove its files.

        Returns the archive's path (None when there was no workspace)."""

    @abc.abstractmethod
    async def recover(self, launch: Launch) -> Handle | None:
        """Find a sandbox whose start was cut short (the control plane died while it booted).

        Its handle when it came up; otherwise None, and nothing of that start is left running."""

    def root_dir(self, sandbox_id: str, sandboxes_dir: Path) -> Path:
        """The sandbox's own directory as its agent server sees it, stored on its row (its
        conversations' working directories are made under `workspace/` there). A process's is
        on this machine; a container's is the same path inside every container."""
        return sandboxes_dir / sandbox_id

    async def start(self) -> None:
        """Prepare what starts use (the process provider's template); nothing by default."""
        return None

    hibernates: bool = False
    """It can end a sandbox's processes and keep its files (`hibernate`), and start it again
    from them (`create` on the same directory)."""

    async def hibernate(self, handle: Handle, root_dir: Path) -> None:
        """End every process of the sandbox, keep its files (workspace, state, its disk); its
        next `create` from the same launch picks them up. Only where `hibernates`."""
        raise ProviderError("this kind of sandbox cannot hibernate")

    async def ready(self) -> None:
        """Returns when what this provider drives sandboxes through answers now (a Docker
        Engine, a Swarm manager); ProviderError saying why not. Quick: asked by `GET /ready`
        (which bounds it anyway). This machine's processes are always there (the default)."""
        return None

    def reserve(self, spec_id: str) -> str | None:
        """The id of a sandbox of `spec_id` made in advance (a warm pool's), taken for a new
        sandbox's row, whose start then only hands it its keys; None: the row gets a new id
        and its start makes everything (the default)."""
        return None

    async def set_network(self, handle: Handle, policy: NetworkPolicy) -> bool:
        """Hold the running (or paused) sandbox to `policy` from now on: new connections meet
        it, open ones go on. False where this provider has no network boundary (its sandboxes
        share the host's network: nothing to hold them to)."""
        return False

    async def refusals(self, handle: Handle) -> Refusals | None:
        """What its policy refused it (None: no boundary here)."""
        return None

    def disk(self, sandbox_id: str, root_dir: Path) -> DiskUsage | None:
        """What the sandbox's own filesystem holds and its limit (None: it has none here).
        Called on the event loop: a look at the filesystem, no call on a daemon."""
        return None

    def inside(self, url: str) -> str:
        """`url` (of this control plane) as a sandbox's processes reach it."""
        return url

    @property
    def sandbox_side(self) -> str | None:
        """This host's address on the sandboxes' side of a network boundary (where they reach
        the control plane, and nothing else of this host); None without a boundary."""
        return None

    def working_dir(self, root_dir: Path) -> Path:
        """The workspace of the sandbox whose directory is `root_dir`, as its processes see it:
        the agent server's working directory, under which conversations get theirs."""
        return root_dir / "workspace"

    async def close(self) -> None:
        """Release the provider's own resources; sandboxes keep running (they are adopted later)."""
        await self._http.aclose()

    def url(self, handle: Handle) -> str:
        """The agent server's address (the AGENT_SERVER exposed URL)."""
        host = f"[{handle.host}]" if ":" in handle.host else handle.host
        return f"http://{host}:{handle.port}"
