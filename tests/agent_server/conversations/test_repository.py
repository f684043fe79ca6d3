"""`repository` at creation: a shallow clone into the working directory before the first step."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import create
from tests.support.api import events, send, status, wait_status
from tests.support.llm import Reply, ScriptedLLM, call
from tests.support.server import ServerProcess
from tests.support.wait import wait_for

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

TOKEN = "tok-for-the-repo-77"
AUTHOR = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **AUTHOR},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def make_origin(root: Path) -> Path:
    """A bare repository with two commits on main and one more on `feature`."""
    work = root / "work"
    work.mkdir(parents=True)
    git(work, "init", "-q", "-b", "main")
    for i in (1, 2):
        (work / "main.txt").write_text(f"main {i}\n")
        git(work, "add", ".")
        git(work, "commit", "-q", "-m", f"main {i}")
    git(work, "checkout", "-q", "-b", "feature")
    (work / "feature.txt").write_text("feature\n")
    git(work, "add", ".")
    git(work, "commit", "-q", "-m", "feature")
    bare = root / "origin.git"
    git(root, "clone", "-q", "--bare", str(work), str(bare))
    return bare


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_origin(tmp_path_factory.mktemp("origin"))


def rerun(client: httpx.Client, cid: str, started: Callable[[], bool]) -> None:
    """POST .../run until the new run shows. The status reads final a moment before the last
    run's task has ended, and a run asked for in that moment is not started (a race in
    Conversation.run, not in what is tested here)."""

    def attempt() -> bool:
        assert client.post(f"/api/conversations/{cid}/run").status_code == 200
        return wait_until(started, 1.0)

    wait_for(attempt, timeout=30, what="a new run")


def wait_until(predicate: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_clone_of_a_branch_before_the_first_step(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, origin: Path
) -> None:
    r = client.patch(
        "/api/settings", json={"git_user_name": "Repo Bot", "git_user_email": "bot@example.com"}
    )
    assert r.status_code == 200
    workspaces: dict[str, Path] = {}
    first_look: list[list[str]] = []

    def responder(k: str, body: dict[str, Any]) -> Reply:
        first_look.append(sorted(os.listdir(workspaces[k])))
        return call("finish", message="done")

    previous, llm.responder = llm.responder, responder
    try:
        ws = tmp_path / "ws"
        workspaces[key] = ws
        url = f"file://{origin}"
        conv = create(
            client,
            llm,
            key,
            ws,
            message="work on the feature",
            run=True,
            repository={"url": url, "branch": "feature"},
        )
        assert conv["repository"] == {"url": url, "branch": "feature", "credential_secret": None}
        assert wait_status(client, conv["id"]) == "finished"
        assert first_look == [[".git", "feature.txt", "main.txt"]]  # there before the model ran
        assert git(ws, "rev-parse", "--abbrev-ref", "HEAD") == "feature"
        assert git(ws, "rev-parse", "--is-shallow-repository") == "true"
        assert git(ws, "rev-list", "--count", "HEAD") == "1"
        assert git(ws, "config", "--get", "remote.origin.url") == url
        assert git(ws, "config", "--get", "user.name") == "Repo Bot"
        assert git(ws, "config", "--get", "user.email") == "bot@example.com"
        assert (
            client.get(f"/api/conversations/{conv['id']}").json()["repository_status"] == "cloned"
        )

        # Cloned once: a later run finds it done (it would refuse the non-empty directory).
        (ws / "work.txt").write_text("the agent's work\n")
        send(client, conv["id"], "more", run=False)
        rerun(client, conv["id"], lambda: len(first_look) >= 2)
        assert wait_status(client, conv["id"]) == "finished"
        assert not events(client, conv["id"], "ConversationErrorEvent")
    finally:
        llm.responder = previous


def test_a_failed_clone_is_an_error_event_and_the_conversation_stays_usable(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    missing = tmp_path / "not-yet.git"
    ws = tmp_path / "ws"
    llm.script(key, call("finish", message="done"))
    conv = create(
        client, llm, key, ws, message="go", run=True, repository={"url": f"file://{missing}"}
    )
    cid = conv["id"]
    assert wait_status(client, cid) == "error"
    failure = events(client, cid, "ConversationErrorEvent")[-1]
    assert failure["code"] == "RepositoryCloneFailed"
    assert f"git clone of file://{missing} exited with 128" in failure["detail"]
    assert "does not appear to be a git repository" in failure["detail"]
    assert llm.requests_for(key) == []  # the agent did not start on an empty workspace
    # The clone's status is stored just after the failure it reports (whoever reads "failed"
    # finds the reason): waited for, as a client polls it.
    info = wait_for(
        lambda: (i := client.get(f"/api/conversations/{cid}").json())["repository_status"] and i,
        10,
        what="the clone's status",
    )
    assert info["repository_status"] == "failed" and info["execution_status"] == "error"

    # Still usable: commands, messages, and a run that tries the clone again.
    r = client.post(f"/api/conversations/{cid}/commands", json={"command": "ls -A | wc -l"})
    assert r.json()["stdout"].strip() == "0"
    make_origin(tmp_path / "later")
    os.rename(tmp_path / "later" / "origin.git", missing)
    send(client, cid, "try again", run=False)
    rerun(client, cid, lambda: status(client, cid) != "error")
    assert wait_status(client, cid) == "finished"
    assert (ws / "main.txt").read_text() == "main 2\n"
    assert len(llm.requests_for(key)) == 1


def test_invalid_repositories_are_refused_at_creation(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    for repository, field in [
        ({"url": "https://user:pw@example.com/r.git"}, "url"),
        ({"url": "ext::sh -c touch% /tmp/pwned"}, "url"),
        ({"url": "-upload-pack=touch /tmp/x"}, "url"),
        ({"url": "https://example.com/r.git", "branch": "--force"}, "branch"),
        ({"url": "https://example.com/r.git", "branch": "a..b"}, "branch"),
        (
            {"url": "https://example.com/r.git", "credential_secret": "not a name"},
            "credential_secret",
        ),
    ]:
        r = client.post(
            "/api/conversations",
            json={
                "agent": {
                    "llm": {"model": "openai/x", "api_key": "k", "base_url": llm.base_url(key)}
                },
                "workspace": {"working_dir": str(tmp_path)},
                "repository": repository,
            },
        )
        assert r.status_code == 422, (repository, r.text)
        assert r.json()["detail"][0]["loc"] == ["body", "repository", field]


# -- a credential over smart HTTP --------------------------------------------------------------


class GitHTTP(BaseHTTPRequestHandler):
    """`git http-backend` behind Basic auth: the token has to arrive for the clone to work."""

    root: Path
    accepted = "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    authorizations: list[str] = []

    def do_GET(self) -> None:
        self._backend()

    def do_POST(self) -> None:
        self._backend()

    def _backend(self) -> None:
        given = self.headers.get("Authorization")
        self.authorizations.append(given or "")
        if given != self.accepted:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        env = {
            "PATH": os.environ["PATH"],
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "REMOTE_USER": "x-access-token",
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        out = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=True
        ).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        headers = [line.split(":", 1) for line in head.decode().split("\r\n") if ":" in line]
        status = next((int(v.split()[0]) for k, v in headers if k.lower() == "status"), 200)
        self.send_response(status)
        for k, v in headers:
            if k.lower() != "status":
                self.send_header(k, v.strip())
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_origin(origin: Path) -> Iterator[str]:
    handler = type("Handler", (GitHTTP,), {"root": origin.parent, "authorizations": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/{origin.name}"
    httpd.shutdown()
    httpd.server_close()


def test_a_credential_goes_to_git_and_nowhere_else(
    client: httpx.Client,
    server: ServerProcess,
    llm: ScriptedLLM,
    key: str,
    tmp_path: Path,
    http_origin: str,
) -> None:
    llm.script(key, call("finish", message="done"))
    ws = tmp_path / "ws"
    conv = create(
        client,
        llm,
        key,
        ws,
        message="go",
        run=True,
        secrets={"GIT_TOKEN": TOKEN},
        repository={"url": http_origin, "credential_secret": "GIT_TOKEN"},
    )
    assert wait_status(client, conv["id"]) == "finished", events(client, conv["id"])
    assert (ws / "main.txt").read_text() == "main 2\n"
    config = (ws / ".git" / "config").read_text()
    assert TOKEN not in config and f"url = {http_origin}\n" in config
    assert "helper" not in config
    assert TOKEN not in json.dumps(events(client, conv["id"]))
    assert TOKEN not in server.output()

    # A wrong token: the clone fails, and the token is not in the error either.
    bad = "wrong-token-12345"
    other = tmp_path / "other"
    conv = create(
        client,
        llm,
        key,
        other,
        message="go",
        run=True,
        secrets={"GIT_TOKEN": bad},
        repository={"url": http_origin, "credential_secret": "GIT_TOKEN"},
    )
    assert wait_status(client, conv["id"]) == "error"
    failure = events(client, conv["id"], "ConversationErrorEvent")[-1]
    assert (
        failure["code"] == "RepositoryCloneFailed" and "Authentication failed" in failure["detail"]
    )
    assert bad not in json.dumps(events(client, conv["id"])) and bad not in server.output()

    # A credential named but not given.
    conv = create(
        client,
        llm,
        key,
        tmp_path / "third",
        message="go",
        run=True,
        repository={"url": http_origin, "credential_secret": "NOT_GIVEN"},
    )
    assert wait_status(client, conv["id"]) == "error"
    detail = events(client, conv["id"], "ConversationErrorEvent")[-1]["detail"]
    assert "'NOT_GIVEN' is not among the conversation's secrets" in detail
