"""SPEC's whole flow through the control plane only, with a real agent-server sandbox and the
scripted LLM: start task to READY, the run finishes, events, work products, a follow-up, PATCH,
download, and DELETE taking the sandbox with its last conversation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control_plane.support import (
    ControlPlane,
    bare_repository,
    configure_llm,
    delete_last_conversation,
    git_daemon,
    make_config,
    start,
    whole_flow,
)
from tests.support.llm import ScriptedLLM

pytestmark = pytest.mark.e2e


@pytest.fixture
def plane(tmp_path: Path, database_url: str) -> Iterator[ControlPlane]:
    """On SQLite and on PostgreSQL."""
    bare_repository(tmp_path / "forge", "acme/demo")
    with git_daemon(tmp_path / "forge") as forge:
        config = make_config(tmp_path / "cp", database_url, repository_url_template=forge)
        server = ControlPlane(config).start()
        yield server
        server.stop()


def test_the_whole_flow(plane: ControlPlane, llm: ScriptedLLM, key: str) -> None:
    flow = whole_flow(plane, llm, key)
    delete_last_conversation(plane, flow)
    assert not (plane.config.state_dir / "sandboxes" / flow.sid).exists()


def test_a_repository_that_cannot_be_cloned_ends_the_task(
    plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    client = plane.client(plane.new_user("bob"))
    configure_llm(client, llm.base_url(key))
    task = start(client, "go", selected_repository="acme/missing")
    assert task["status"] == "ERROR" and "acme/missing could not be cloned" in task["detail"]
    assert client.get("/api/v1/app-conversations/search").json()["items"] == []
    # The sandbox made for it went with it.
    sandboxes = client.get("/api/v1/sandboxes/search").json()["items"]
    assert [s["status"] for s in sandboxes] == ["MISSING"]
