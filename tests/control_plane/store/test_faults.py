"""Faults of the store (issue 25.10), in a bounded form: PostgreSQL stopped and started again
in the middle of a run, and the disk under SQLite full. The control plane answers 503 where it
cannot store (never a 500, never the driver's SQL), serves the reads it can, recovers without a
restart, and loses no event a sandbox was told was stored: the agent server keeps what was
refused and sends it again."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.control_plane.postgres import PostgresServer, binaries
from tests.control_plane.support import (
    ControlPlane,
    configure_llm,
    conversation,
    make_config,
    start,
)
from tests.support.llm import ScriptedLLM, call
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

GATE = "while [ ! -e gate ]; do sleep 0.1; done; echo passed"


def _refused(r: httpx.Response) -> bool:
    """A 503 that says to try again, with no SQL in it."""
    return r.status_code == 503 and "again" in r.json()["detail"] and "SQL" not in r.text


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A server of this test's own: it is stopped and started again (the session's is shared)."""
    bindir = binaries()
    assert bindir is not None, "`make system-deps` installs Debian's postgresql"
    server = PostgresServer(bindir).start()
    yield server
    server.stop()


def test_postgresql_stopped_and_started_again_mid_run(
    own_postgres: PostgresServer, tmp_path: Path, llm: ScriptedLLM, key: str
) -> None:
    plane = ControlPlane(make_config(tmp_path / "cp", own_postgres.new_database())).start()
    try:
        client = plane.client(plane.new_user("pat"))
        configure_llm(client, llm.base_url(key))
        llm.script(key, call("terminal", command=GATE), call("finish", message="done"))
        task = start(client, "wait for the gate")
        cid, sid = task["app_conversation_id"], task["sandbox_id"]
        sandbox = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
        agent = httpx.Client(
            base_url=sandbox["exposed_urls"][0]["url"],
            timeout=30,
            headers={"X-Session-API-Key": sandbox["session_api_key"]},
        )
        wait_for(
            lambda: (
                client.get(
                    f"/api/v1/conversation/{cid}/events/count", params={"kind__eq": "ActionEvent"}
                ).json()
                == 1
            ),
            60,
            what="the command under way",
        )

        own_postgres.halt()
        assert _refused(client.get("/api/v1/app-conversations/search"))
        assert _refused(client.patch("/api/v1/settings", json={"llm_stream": True}))
        (Path(conversation_dir(plane, sid, cid)) / "gate").touch()  # the run goes on
        webhook = wait_for(
            lambda: (
                (w := agent.get(f"/api/conversations/{cid}").json()["webhook"])["last_error"] and w
            ),
            60,
            what="a batch refused while it is down",
        )
        assert "503" in webhook["last_error"] and webhook["pending"] > 0

        own_postgres.resume()  # the same control plane, not restarted
        wait_for(
            lambda: client.get("/api/v1/app-conversations/search").status_code == 200,
            60,
            what="reads again",
        )
        wait_for(
            lambda: conversation(client, cid)["execution_status"] == "finished",
            120,
            what="the run's end, sent again",
        )
        wait_for(
            lambda: agent.get(f"/api/conversations/{cid}").json()["webhook"]["pending"] == 0,
            120,
            what="every event delivered",
        )
        assert stored_ids(client, cid) == agent_ids(agent, cid)  # none lost, none doubled
        assert (
            "passed"
            in client.get(
                f"/api/v1/conversation/{cid}/events/search", params={"kind__eq": "ObservationEvent"}
            ).text
        )
        assert client.patch("/api/v1/settings", json={"llm_stream": True}).status_code == 200
        agent.close()
    finally:
        plane.stop()


def conversation_dir(plane: ControlPlane, sid: str, cid: str) -> Path:
    return plane.config.state_dir / "sandboxes" / sid / "workspace" / cid


def stored_ids(client: httpx.Client, cid: str) -> list[str]:
    items = client.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 1000}).json()[
        "items"
    ]
    # The control plane's own notices (UUIDs) are not the agent server's.
    return [e["id"] for e in items if "-" not in e["id"]]


def agent_ids(agent: httpx.Client, cid: str) -> list[str]:
    page: dict[str, Any] = agent.get(
        f"/api/conversations/{cid}/events/search", params={"limit": 100}
    ).json()
    found = [e["id"] for e in page["items"]]
    assert page.get("next_page_id") is None
    return [i for i in found]


@contextlib.contextmanager
def small_disk(path: Path, size: str = "4m") -> Iterator[Path]:
    """A file system of `size` at `path` (tmpfs: root only; CI runs as root)."""
    path.mkdir(parents=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        check=True,
        capture_output=True,
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill(disk: Path) -> Path:
    """Every free byte of `disk` taken by one file; returns it."""
    filler = disk / "filler"
    with filler.open("wb") as out:
        with contextlib.suppress(OSError):
            while True:
                out.write(b"\0" * 65536)
                out.flush()
                os.fsync(out.fileno())
    return filler


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small file system needs root (CI is)")
def test_the_disk_under_sqlite_full(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        url = f"sqlite+aiosqlite:///{disk / 'control-plane.db'}"
        plane = ControlPlane(make_config(tmp_path / "cp", url)).start()
        try:
            client = plane.client(plane.new_user("dora"))
            assert client.patch("/api/v1/settings", json={"llm_model": "m1"}).status_code == 200
            filler = fill(disk)
            r = client.patch(
                "/api/v1/settings", json={"llm_model": "m" * 100, "git_user_name": "x" * 200}
            )
            assert _refused(r), r.text
            # Reads it can: the account, its settings as stored, its searches.
            assert client.get("/api/v1/settings").json()["llm_model"] == "m1"
            assert client.get("/api/v1/app-conversations/search").status_code == 200
            filler.unlink()  # room again: the same control plane, not restarted
            r = client.patch("/api/v1/settings", json={"llm_model": "m2"})
            assert r.status_code == 200, r.text
            assert client.get("/api/v1/settings").json()["llm_model"] == "m2"
        finally:
            plane.stop()
