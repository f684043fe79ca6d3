"""What the Docker and Swarm providers share: the sandbox image's layout, how a sandbox is
named and labelled, its limits and hardening, the Docker client kept off the event loop, and
the archive a deleted sandbox's workspace is written to.

The Docker SDK blocks, so every call runs in a worker thread (`anyio.to_thread`); the client
is connected on first use with its API version negotiated, so a control plane starts while
Docker is away and a start then fails with the reason.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import socket
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import docker
import docker.errors
import httpx

from control_plane.providers.parking import Parking
from control_plane.sandboxes.provider import (
    PROJECT_DIR,
    Launch,
    Limits,
    ProviderError,
    SandboxSpec,
)
from launch.env import LaunchEnv

T = TypeVar("T")

PORT_NUMBER = 8000
"""The agent server's port inside its container."""
VOLUME_DIR = "/workspace"
"""The sandbox volume's mount point (the image's one VOLUME; the sandbox's root_dir)."""
STATE_DIR = VOLUME_DIR + "/.agent-server"
"""The agent server's state, on the volume beside the workspace."""
WORKSPACE = PROJECT_DIR
"""Where OpenHands clients expect the project."""
LABEL_SANDBOX = "agent-server.sandbox"
LABEL_PLANE = "agent-server.control-plane"
UID = 1000
USER = f"{UID}:{UID}"
"""The image's unprivileged user (sandbox.Dockerfile's `agent`), enforced whatever the image
says."""
HOME = "/home/agent"
#: Bytes of a sandbox's log quoted when its agent server exits while starting.
LOG_TAIL = 2000
#: Seconds the Engine API has to answer a readiness ping.
READY_TIMEOUT = 2
#: The API version a ping's client is made with (unused by `/_ping`; none is negotiated).
PING_VERSION = "1.41"


def refers_to(ref: str, object_id: str, old_key: Callable[[str], int]) -> bool:
    """Whether a handle's ref names this container or service (and not another of the same
    name). Its ref is the object's id; one started before refs has the shape migration 0008
    wrote from the old columns, `"<pid>:<old_key(id)>"`: the database never held the whole id,
    so that sandbox is known by those bits."""
    if ref == object_id:
        return True
    _, colon, key = ref.partition(":")
    return bool(colon) and key == str(old_key(object_id))


def name_of(sandbox_id: str) -> str:
    """The container's (or service's) and the volume's name."""
    return f"agent-sandbox-{sandbox_id}"


def plane_label(db_url: str) -> str:
    """The deployment's label value: control planes on one database adopt each other's
    sandboxes; others (a test's, another install's) leave them alone. A digest, so the URL's
    password never reaches a label."""
    return hashlib.sha256(db_url.encode()).hexdigest()[:16]


def environment(
    webhook_url: str, keys_fd: int, traces_url: str | None = None, ready_fd: int | None = None
) -> dict[str, str]:
    """A sandbox's whole environment: the webhook, where its state and workspace are, the
    descriptor its keys come on (and the one it says it serves on), and where its spans go.
    Nothing of the control plane's own, and no key."""
    launch = LaunchEnv(
        keys_fd=keys_fd,
        ready_fd=ready_fd,
        webhook_url=webhook_url,
        traces_url=traces_url,
        state_dir=STATE_DIR,
        working_dir=WORKSPACE,
        log_level="warning",
    )
    return {**launch.environment(), "HOME": HOME}


def hand_over(attached: Any, keys: bytes) -> None:
    """`keys` written to a container's stdin through the SDK's attach object (a SocketIO
    over unix or tcp, a channel over ssh), then its end."""
    raw = getattr(attached, "_sock", attached)
    raw.sendall(keys)
    with contextlib.suppress(OSError):
        if hasattr(raw, "shutdown_write"):
            raw.shutdown_write()
        else:
            raw.shutdown(socket.SHUT_WR)


def close_attach(attached: Any) -> None:
    """The attach object and what it wraps: closing the object alone leaves the socket open."""
    for part in (getattr(attached, "_sock", None), attached):
        if part is not None:
            with contextlib.suppress(OSError):
                part.close()


def explain(exc: docker.errors.DockerException) -> str:
    if isinstance(exc, docker.errors.APIError):
        return str(exc.explanation or exc)
    return str(exc)


class ContainerProvider(Parking[str]):
    """A provider whose sandboxes are containers of the sandbox image, driven through a Docker
    Engine API (a daemon's, or a swarm manager's); each kind parks them too (`parking`), for a
    warm pool that wraps it."""

    spec: SandboxSpec

    def __init__(
        self,
        archive_dir: Path,
        *,
        image: str,
        plane: str,
        docker_url: str,
        limits: Limits,
        start_timeout: float,
        stop_grace: float,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(start_timeout=start_timeout, transport=transport)
        self.archive_dir = archive_dir
        self.image = image
        self.plane = plane
        self.docker_url = docker_url
        self.limits = limits
        self.stop_grace = stop_grace
        self._client: docker.DockerClient | None = None
        self._connecting = threading.Lock()

    def specs(self) -> list[SandboxSpec]:
        return [self.spec]

    def root_dir(self, sandbox_id: str, sandboxes_dir: Path) -> Path:
        """Inside its container: the volume, with the workspace under it."""
        return Path(VOLUME_DIR)

    def working_dir(self, root_dir: Path) -> Path:
        return Path(WORKSPACE)

    def labels(self, sandbox_id: str) -> dict[str, str]:
        return {LABEL_SANDBOX: sandbox_id, LABEL_PLANE: self.plane}

    def label_filter(self, sandbox_id: str) -> dict[str, str | list[str] | bool]:
        """The Engine API's filter for the sandbox's objects (never found by name alone)."""
        return {"label": [f"{k}={v}" for k, v in self.labels(sandbox_id).items()]}

    def check_spec(self, launch: Launch) -> None:
        if launch.spec_id != self.spec.id:
            raise ProviderError(f"unknown sandbox spec {launch.spec_id!r}")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(client, *args)` in a worker thread; Docker's errors become ProviderErrors."""

        def call() -> T:
            try:
                return fn(self._docker(), *args)
            except docker.errors.ImageNotFound as exc:
                raise ProviderError(
                    f"the sandbox image {self.image!r} is not there: build it "
                    "with `make image` (or set CONTROL_PLANE_SANDBOX_IMAGE)"
                ) from exc
            except docker.errors.DockerException as exc:
                raise ProviderError(f"Docker: {explain(exc)}") from exc

        return await anyio.to_thread.run_sync(call)

    async def ready(self) -> None:
        """The Engine API's ping (this daemon's, or the Swarm manager's), on a client of its own
        whose calls wait READY_TIMEOUT seconds at most (the shared one's wait out a stop)."""

        def ping() -> None:
            if self.docker_url.startswith("unix://"):
                # The SDK leaves the socket of a failed connection to a unix path open: tried
                # here first, and closed.
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                    probe.settimeout(READY_TIMEOUT)
                    probe.connect(self.docker_url.removeprefix("unix://"))
            # `/_ping` has no API version in its path, so none is asked for first (a failed
            # "auto" leaves its connection open), and every Engine version answers it.
            client = docker.APIClient(
                base_url=self.docker_url, version=PING_VERSION, timeout=READY_TIMEOUT
            )
            try:
                answer = client.get(f"{client.base_url}/_ping", timeout=READY_TIMEOUT)
                if answer.status_code != 200:
                    raise RuntimeError(f"its ping answered {answer.status_code}")
            finally:
                client.close()

        try:
            await anyio.to_thread.run_sync(ping, abandon_on_cancel=True)
        except Exception as exc:  # the SDK's, or requests' own for a socket that went away
            words = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ProviderError(
                f"the Docker Engine at {self.docker_url} does not answer: {words}"
            ) from None

    def _docker(self) -> docker.DockerClient:
        with self._connecting:
            if self._client is None:
                self._client = docker.DockerClient(
                    base_url=self.docker_url,
                    version="auto",
                    timeout=max(30, int(self.stop_grace) + 30),
                )
            return self._client

    def write_archive(
        self, sandbox_id: str, chunks: Iterable[bytes], *, compressed: bool = False
    ) -> Path:
        """The workspace's tar stream as `<archive dir>/<sandbox id>.tar.gz` (0600), written
        whole or not at all. `compressed`: the chunks are gzip already."""
        self.archive_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        archive = self.archive_dir / f"{sandbox_id}.tar.gz"
        partial_path = archive.with_suffix(".partial")
        with open(partial_path, "wb") as raw:
            partial_path.chmod(0o600)
            if compressed:
                for chunk in chunks:
                    raw.write(chunk)
            else:
                with gzip.GzipFile(fileobj=raw, mode="wb") as out:
                    for chunk in chunks:
                        out.write(chunk)
        partial_path.replace(archive)
        return archive

    async def close(self) -> None:
        await super().close()
        if self._client is not None:
            await anyio.to_thread.run_sync(self._client.close)
            self._client = None
