"""The selected repository is cloned during the start task (PREPARING_REPOSITORY), also when
the conversation does not run yet, and a clone that fails says why, in git's words (issue 30.8)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control_plane.support import (
    ControlPlane,
    bare_repository,
    configure_llm,
    git_daemon,
    make_config,
    start,
)
from tests.support.llm import ScriptedLLM

pytestmark = pytest.mark.e2e


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    bare_repository(tmp_path / "forge", "acme/demo")
    with git_daemon(tmp_path / "forge") as forge:
        server = ControlPlane(make_config(tmp_path / "cp", repository_url_template=forge)).start()
        yield server
        server.stop()


def test_a_start_that_does_not_run_clones_during_the_task(
    plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    client = plane.client(plane.new_user("ann"))
    configure_llm(client, llm.base_url(key))
    task = start(client, "later", run=False, selected_repository="acme/demo")
    assert task["status"] == "READY", task
    cid = task["app_conversation_id"]
    # The clone is there before any run: the agent never ran, the model was never asked.
    r = client.get(f"/api/v1/app-conversations/{cid}/file", params={"path": "README.md"})
    assert r.status_code == 200 and r.text == "# demo\n", r.text
    record = client.get("/api/v1/app-conversations", params={"ids": cid}).json()[0]
    assert record["execution_status"].upper() == "IDLE" and llm.requests_for(key) == []


@pytest.mark.parametrize("run", [True, False])
def test_a_failed_clone_says_why_in_gits_words(
    plane: ControlPlane, llm: ScriptedLLM, key: str, run: bool
) -> None:
    client = plane.client(plane.new_user("bob"))
    configure_llm(client, llm.base_url(key))
    task = start(client, "go", run=run, selected_repository="acme/missing")
    assert task["status"] == "ERROR", task
    detail = task["detail"]
    assert "acme/missing could not be cloned" in detail
    assert "git clone of git://" in detail and "fatal:" in detail and "not exported" in detail
    assert client.get("/api/v1/app-conversations/search").json()["items"] == []


def test_a_streamed_start_shows_its_stages_in_order_and_closes_at_ready(
    plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    """`stream-start` (the app server's): one JSON array, an element per stage reached, the
    clone among them, closed once the task is READY; the conversation is there then."""
    client = plane.client(plane.new_user("cy"))
    configure_llm(client, llm.base_url(key))
    body = {
        "initial_message": {
            "role": "user",
            "content": [{"type": "text", "text": "x"}],
            "run": False,
        },
        "selected_repository": "acme/demo",
    }
    with client.stream("POST", "/api/v1/app-conversations/stream-start", json=body) as r:
        assert r.status_code == 200, r.read()
        stages = [task["status"] for task in json.loads(r.read())]
    order = ["WORKING", "WAITING_FOR_SANDBOX", "STARTING_CONVERSATION", "PREPARING_REPOSITORY"]
    assert stages[-1] == "READY" and "PREPARING_REPOSITORY" in stages, stages
    assert stages[:-1] == sorted(stages[:-1], key=order.index), stages
    cid = client.get("/api/v1/app-conversations/search").json()["items"][0]["id"]
    r = client.get(f"/api/v1/app-conversations/{cid}/file", params={"path": "README.md"})
    assert r.status_code == 200 and r.text == "# demo\n", r.text
