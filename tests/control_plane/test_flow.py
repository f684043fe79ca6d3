"""SPEC's whole flow through the control plane only, with a real agent-server sandbox and the
scripted LLM: start task to READY, the run finishes, events, work products, a follow-up, PATCH,
download, and DELETE taking the sandbox with its last conversation."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.control_plane.support import (
    ControlPlane,
    configure_llm,
    conversation,
    git_daemon,
    make_config,
    start,
)
from tests.support.llm import ScriptedLLM, call
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e


def bare_repository(root: Path, name: str) -> Path:
    """A local 'forge': <root>/<org>/<repo>.git with one commit on main."""
    seed = root / "seed"
    seed.mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    (seed / "README.md").write_text("# demo\n")
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-qm", "seed"]):
        subprocess.run(["git", *args], cwd=seed, check=True, env=env)
    bare = root / f"{name}.git"
    bare.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(bare)], check=True)
    return bare


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


@dataclass
class Flow:
    """What the flow leaves for a provider's own checks."""

    client: httpx.Client
    cid: str
    sid: str
    url: str
    """The sandbox's AGENT_SERVER URL."""
    session: str
    """The sandbox's session key."""

    def actions(self) -> list[dict[str, object]]:
        r = self.client.get(f"/api/v1/conversation/{self.cid}/events/search",
                            params={"kind__eq": "ActionEvent", "limit": 100})
        assert r.status_code == 200, r.text
        items: list[dict[str, object]] = r.json()["items"]
        return items


def whole_flow(plane: ControlPlane, llm: ScriptedLLM, key: str, llm_host: str | None = None) -> Flow:
    """From the start request to the sandbox's record, on whatever provider `plane` has;
    `llm_host`: the scripted LLM's name as the sandbox knows it."""
    api_key = plane.new_user("alice")
    client = plane.client(api_key)
    configure_llm(client, llm.base_url(key, host=llm_host), tools=["terminal", "file_editor"],
                  git_user_name="Alice", git_user_email="alice@example.com")
    llm.script(key,
               call("terminal", command="echo 'print(1)' > hello.py && echo more >> README.md"),
               call("finish", message="done"))

    task = start(client, "Write hello.py", selected_repository="acme/demo", selected_branch="main",
                 title="first", observability_tags=["t1"],
                 observability_metadata={"team": "core", "ids": [1, 2]})
    assert task["status"] == "READY", task
    cid, sid = task["app_conversation_id"], task["sandbox_id"]

    record = wait_for(lambda: (r := conversation(client, cid))["execution_status"] == "FINISHED" and r,
                      60, what="the run to finish")
    assert record["sandbox_id"] == sid and record["sandbox_status"] == "RUNNING"
    assert record["selected_repository"] == "acme/demo" and record["selected_branch"] == "main"
    assert record["title"] == "first" and record["observability_metadata"] == {"team": "core", "ids": [1, 2]}

    # Events arrive through the webhook and are searched in the control plane's own store.
    actions = Flow(client=client, cid=cid, sid=sid, url="", session="").actions
    two = wait_for(lambda: a if len(a := actions()) >= 2 else [], 30, what="ActionEvents")
    assert [a["tool_name"] for a in two] == ["terminal", "finish"]
    wait_for(lambda: conversation(client, cid)["metrics"]["prompt_tokens"] > 0, 30, what="metrics")

    # Work products, read through the sandbox.
    r = client.get(f"/api/v1/app-conversations/{cid}/file", params={"path": "hello.py"})
    assert r.status_code == 200 and r.text == "print(1)\n"
    changes = client.get(f"/api/v1/app-conversations/{cid}/git/changes").json()
    assert {(c["path"], c["status"]) for c in changes} >= {("hello.py", "ADDED"), ("README.md", "UPDATED")}
    diff = client.get(f"/api/v1/app-conversations/{cid}/git/diff")
    assert diff.status_code == 200 and "+more" in diff.text
    assert client.get(f"/api/v1/app-conversations/{cid}/skills").status_code == 200
    assert client.get(f"/api/v1/app-conversations/{cid}/hooks").status_code == 200

    # A follow-up message runs the agent again.
    llm.script(key, call("finish", message="again"))
    r = client.post(f"/api/v1/app-conversations/{cid}/send-message",
                    json={"role": "user", "content": [{"type": "text", "text": "once more"}], "run": True})
    assert r.status_code == 200, r.text
    wait_for(lambda: len(actions()) >= 3, 30, what="the follow-up's action")

    r = client.patch(f"/api/v1/app-conversations/{cid}", json={"title": "renamed", "tags": {"k": "v"}})
    assert r.status_code == 200 and r.json()["title"] == "renamed" and r.json()["tags"] == {"k": "v"}
    found = client.get("/api/v1/app-conversations/search", params={"title__contains": "NAME"}).json()
    assert [c["id"] for c in found["items"]] == [cid]
    assert client.get("/api/v1/app-conversations/count").json() == {"count": 1}

    r = client.get(f"/api/v1/app-conversations/{cid}/download")
    assert r.status_code == 200
    with zipfile.ZipFile(io.BytesIO(r.content)) as archive:
        stored = [json.loads(line) for line in archive.read("events.jsonl").splitlines()]
        meta = json.loads(archive.read("meta.json"))
    assert meta["id"] == cid and sum(e["kind"] == "ActionEvent" for e in stored) == 3
    assert "sk-test-key" not in r.content.decode(errors="replace")

    # The sandbox record: its key and URL while RUNNING; SPEC 5 rule 1 both ways.
    sandbox = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
    assert sandbox["status"] == "RUNNING"
    [exposed] = sandbox["exposed_urls"]
    assert exposed["name"] == "AGENT_SERVER"
    session = sandbox["session_api_key"]
    assert httpx.get(exposed["url"] + f"/api/conversations/{cid}",
                     headers={"Authorization": f"Bearer {api_key}"}).status_code == 401
    assert httpx.get(exposed["url"] + f"/api/conversations/{cid}",
                     headers={"X-Session-API-Key": session}).status_code == 200
    assert plane.client(session).get("/api/v1/settings").status_code == 401
    # The git author of the user's settings was given to the sandbox (SPEC 5 rule 5).
    settings = httpx.get(exposed["url"] + "/api/settings", headers={"X-Session-API-Key": session}).json()
    assert (settings["git_user_name"], settings["git_user_email"]) == ("Alice", "alice@example.com")
    return Flow(client=client, cid=cid, sid=sid, url=exposed["url"], session=session)


def delete_last_conversation(plane: ControlPlane, flow: Flow) -> None:
    """Deleting the last conversation removes the sandbox; its workspace is archived, not served."""
    client, cid, sid = flow.client, flow.cid, flow.sid
    r = client.delete(f"/api/v1/app-conversations/{cid}")
    assert r.status_code == 200 and r.json()["sandbox_deleted"] is True
    sandbox = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
    assert sandbox["status"] == "MISSING" and sandbox["session_api_key"] is None
    assert sandbox["exposed_urls"] is None
    with pytest.raises(httpx.HTTPError):
        httpx.get(flow.url + "/alive", timeout=2)
    archive = plane.config.state_dir / "archives" / f"{sid}.tar.gz"
    with tarfile.open(archive) as tar:  # the workspace with the agent's work in it
        assert any(name.endswith("/hello.py") for name in tar.getnames())
    assert client.get("/api/v1/app-conversations", params={"ids": cid}).json() == [None]
    assert client.get(f"/api/v1/conversation/{cid}/events/search").status_code == 404


def test_a_repository_that_cannot_be_cloned_ends_the_task(plane: ControlPlane, llm: ScriptedLLM,
                                                          key: str) -> None:
    client = plane.client(plane.new_user("bob"))
    configure_llm(client, llm.base_url(key))
    task = start(client, "go", selected_repository="acme/missing")
    assert task["status"] == "ERROR" and "acme/missing could not be cloned" in task["detail"]
    assert client.get("/api/v1/app-conversations/search").json()["items"] == []
    # The sandbox made for it went with it.
    sandboxes = client.get("/api/v1/sandboxes/search").json()["items"]
    assert [s["status"] for s in sandboxes] == ["MISSING"]
