"""Fixtures of the control-plane tests: a real PostgreSQL for the session, a database URL per
test on each backend, and a running control plane."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control_plane.postgres import PostgresServer, binaries
from tests.control_plane.support import ControlPlane, make_config


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    bindir = binaries()
    if bindir is None:
        pytest.skip("PostgreSQL binaries are absent (/usr/lib/postgresql/*/bin): "
                    "`make system-deps` installs Debian's postgresql package")
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
