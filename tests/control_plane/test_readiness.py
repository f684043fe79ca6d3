"""`GET /ready` (issue 42.5) on real parts: 200 while the database and the sandbox provider
answer; 503 naming the part and why, within a bounded time, when PostgreSQL is stopped or the
Docker Engine cannot be reached; 200 again once they are back. `/alive` answers throughout."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.readiness import TIMEOUT
from tests.control_plane.postgres import PostgresServer, binaries
from tests.control_plane.support import ControlPlane, make_config
from tests.support import docker as docker_support
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

PASSWORD = "pw-never-shown-4242"


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A server of this test's own: it is stopped and started again (the session's is shared)."""
    bindir = binaries()
    if bindir is None:
        pytest.skip("PostgreSQL binaries are absent (`make system-deps` installs them)")
    server = PostgresServer(bindir).start()
    yield server
    server.stop()


def ready(plane: ControlPlane) -> httpx.Response:
    """One `GET /ready`, which must answer within its bound whatever has failed."""
    began = time.monotonic()
    r = httpx.get(plane.url + "/ready", timeout=TIMEOUT + 10)
    assert time.monotonic() - began < TIMEOUT + 2, "readiness must not hang"
    assert r.headers["content-type"] == "application/json"
    return r


def failing(plane: ControlPlane, part: str) -> dict[str, Any] | None:
    """The body of a 503 in which `part` failed; None while it is 200."""
    r = ready(plane)
    if r.status_code == 200:
        return None
    assert r.status_code == 503, r.text
    body: dict[str, Any] = r.json()
    assert body["status"] == "not ready" and body["checks"][part]["ok"] is False, body
    return body


def test_not_ready_while_postgresql_is_stopped(
    own_postgres: PostgresServer, tmp_path: Path
) -> None:
    # trust authentication takes any password: the URL carries one, which no answer may show
    url = own_postgres.new_database().replace("postgres@", f"postgres:{PASSWORD}@")
    plane = ControlPlane(make_config(tmp_path / "cp", url)).start()
    try:
        r = ready(plane)
        assert r.status_code == 200, r.text
        assert r.json() == {
            "status": "ready",
            "checks": {
                "database": {"ok": True, "detail": "answers"},
                "sandbox_provider": {"ok": True, "detail": "reachable"},
            },
        }

        own_postgres.halt()
        body = wait_for(lambda: failing(plane, "database"), 30, what="503 for the database")
        assert body is not None
        detail = body["checks"]["database"]["detail"]
        assert detail.startswith("the database does not answer"), detail
        assert PASSWORD not in str(body)
        assert body["checks"]["sandbox_provider"]["ok"] is True
        assert httpx.get(plane.url + "/alive").status_code == 200  # alive, not ready

        own_postgres.resume()
        wait_for(lambda: ready(plane).status_code == 200, 30, what="ready again")
    finally:
        plane.stop()


@pytest.fixture
def engine_socket(docker_daemon: docker_support.Daemon, tmp_path: Path) -> Path:
    """Where the Docker provider reaches the Engine: a link to the daemon's socket, made and
    removed by the test (the daemon itself keeps running for the other tests)."""
    return tmp_path / "engine.sock"


def test_not_ready_while_the_docker_engine_cannot_be_reached(
    engine_socket: Path, tmp_path: Path
) -> None:
    config = make_config(
        tmp_path / "cp",
        host="0.0.0.0",
        sandbox_provider="docker",
        sandbox_network="host",
        docker_url=f"unix://{engine_socket}",
    )
    plane = ControlPlane(config).start()  # it starts while Docker is away
    try:
        body = failing(plane, "sandbox_provider")
        assert body is not None
        detail = body["checks"]["sandbox_provider"]["detail"]
        assert detail.startswith("the sandbox provider cannot be reached"), detail
        assert str(engine_socket) in detail
        assert body["checks"]["database"] == {"ok": True, "detail": "answers"}

        engine_socket.symlink_to(docker_support.SOCKET)
        wait_for(lambda: ready(plane).status_code == 200, 30, what="the engine reached")
        engine_socket.unlink()
        wait_for(lambda: failing(plane, "sandbox_provider"), 30, what="the engine gone")
        engine_socket.symlink_to(docker_support.SOCKET)
        wait_for(lambda: ready(plane).status_code == 200, 30, what="the engine back")
    finally:
        plane.stop()
