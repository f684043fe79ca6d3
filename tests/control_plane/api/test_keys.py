"""`control-plane keys list` and `keys revoke` (issue 30.8): an operator lists the keys without
ever seeing one, and a revoked key is refused at once by every control plane on the database."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.control_plane.planes import PlaneProcess, several
from tests.control_plane.postgres import PostgresServer

pytestmark = pytest.mark.e2e


@pytest.fixture
def planes(tmp_path: Path, postgres: PostgresServer) -> Iterator[list[PlaneProcess]]:
    found = several(tmp_path, postgres.new_database(), 2)
    yield found
    for plane in found:
        plane.stop()


def keys(plane: PlaneProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "control_plane", "keys", *args],
        env=plane.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def status(plane: PlaneProcess, key: str) -> int:
    return httpx.get(
        plane.url + "/api/v1/settings", headers={"Authorization": f"Bearer {key}"}, timeout=10
    ).status_code


def test_a_revoked_key_is_refused_at_once_by_every_plane(planes: list[PlaneProcess]) -> None:
    first, second = planes
    alice = [first.new_key("alice"), first.new_key("alice")]
    bob = second.new_key("bob")
    assert {status(p, k) for p in planes for k in [*alice, bob]} == {200}

    listed = keys(second, "list")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert [r[1] for r in rows] == ["alice", "alice", "bob"]
    assert not any(k in listed.stdout or k[3:] in listed.stdout for k in [*alice, bob])
    assert [
        r[1]
        for r in (
            line.split("\t") for line in keys(first, "list", "--user", "bob").stdout.splitlines()
        )
    ] == ["bob"]

    # One of alice's keys, revoked through one plane: both refuse it on the next request.
    revoked = keys(second, "revoke", rows[0][0])
    assert revoked.returncode == 0 and revoked.stdout.strip() == "revoked 1 key", revoked.stderr
    assert [status(p, alice[0]) for p in planes] == [401, 401]
    assert [status(p, alice[1]) for p in planes] == [200, 200]
    again = keys(first, "revoke", rows[0][0])
    assert again.returncode == 2 and "no key" in again.stderr

    # Every key of a user.
    assert keys(first, "revoke", "--user", "bob").stdout.strip() == "revoked 1 key"
    assert [status(p, bob) for p in planes] == [401, 401]
    assert keys(first, "revoke").returncode == 2  # neither an id nor a user
    assert [line.split("\t")[1] for line in keys(first, "list").stdout.splitlines()] == ["alice"]
