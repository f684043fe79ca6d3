"""Fixtures of the control-plane tests: a real PostgreSQL for the session, a database URL per
test on each backend, a running control plane, and Docker with the sandbox image (the daemon
started for the session when it is installed but not running)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.control_plane.postgres import PostgresServer, binaries
from tests.control_plane.support import ControlPlane, make_config
from tests.support import docker as docker_support
from tests.support.llm import ScriptedLLM


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    bindir = binaries()
    if bindir is None:
        pytest.skip(
            "PostgreSQL binaries are absent (/usr/lib/postgresql/*/bin): "
            "`make system-deps` installs Debian's postgresql package"
        )
    server = PostgresServer(bindir).start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each store test runs on both backends."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'store.db'}"
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.new_database()


@pytest.fixture
def control_plane(tmp_path: Path) -> Iterator[ControlPlane]:
    """A control plane on SQLite under a fresh state directory; its sandboxes die with it."""
    plane = ControlPlane(make_config(tmp_path / "cp")).start()
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def docker_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[docker_support.Daemon]:
    """The local Docker daemon; started (and stopped at the end) only when it was not running."""
    try:
        daemon = docker_support.Daemon.ensure(tmp_path_factory.mktemp("dockerd") / "dockerd.log")
    except docker_support.Unavailable as exc:
        pytest.skip(str(exc))
    yield daemon
    daemon.stop()


@pytest.fixture(scope="session")
def sandbox_image(docker_daemon: docker_support.Daemon) -> str:
    """sandbox.Dockerfile built on a Debian made here (cached: quick after the first run)."""
    try:
        return docker_support.sandbox_image()
    except docker_support.Unavailable as exc:
        pytest.skip(str(exc))


# -- the Docker provider's tests (test_docker, test_warm_pool) ------------------------------


@pytest.fixture(scope="module")
def engine(docker_daemon: docker_support.Daemon) -> Iterator[docker.DockerClient]:
    with contextlib.closing(docker_support.client()) as c:
        yield c


@pytest.fixture(scope="module")
def gateway(engine: docker.DockerClient) -> str:
    return docker_support.bridge_gateway(engine)


@pytest.fixture(scope="module")
def bridge_llm(gateway: str) -> Iterator[ScriptedLLM]:
    """The scripted LLM where containers reach it (the bridge's address on this host)."""
    server = ScriptedLLM(host=gateway).start()
    yield server
    server.stop()
