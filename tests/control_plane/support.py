"""The control plane under test: a real uvicorn server in a thread on a free loopback port (the
sandboxes it starts must reach its webhook), small helpers for its API, and SPEC's whole flow
through it (`whole_flow`), which each provider's tests run."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from control_plane.__main__ import create_key
from control_plane.app import Server, build_app
from control_plane.config import Config
from control_plane.providers.process import gvisor
from core import namespaces, processes
from core.retry import Clock
from tests.support import probe
from tests.support.internet import Internet, forget_docker_network
from tests.support.llm import ScriptedLLM, call, free_port
from tests.support.wait import wait_for


class ShiftedClock(Clock):
    """The system's time, moved on by `offset` seconds when the test says so (the lifecycle's
    timers come due without waiting; time still passes)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset


def make_config(
    state_dir: Path, database_url: str | None = None, host: str = "127.0.0.1", **extra: Any
) -> Config:
    port = free_port()
    # No template by default: each plane's would spend seconds of CPU importing, and most
    # tests start their sandboxes before it is ready; test_isolation runs both kinds.
    # Sandboxes on a subnet of their deployment's own, whose packets never leave this machine,
    # asking the test internet's DNS server (`tests.support.internet`).
    internet = Internet.shared()
    deployment = database_url or str(state_dir)
    defaults: dict[str, Any] = {
        "stop_sandboxes_on_exit": True,
        "health_interval": 0.5,
        "sandbox_stop_grace": 2.0,
        "sandbox_template": False,
        "sandbox_subnet": internet.subnet(deployment),
        "docker_network": internet.docker_network(deployment),
        "sandbox_dns_upstream": (internet.dns,),
    }
    return Config(
        host=host,
        port=port,
        state_dir=state_dir,
        database_url=database_url,
        **{**defaults, **extra},
    )


class ControlPlane:
    def __init__(self, config: Config, clock: Clock | None = None) -> None:
        self.config = config
        self.url = f"http://127.0.0.1:{config.port}"
        # Listening on the config's host (0.0.0.0 for containers' webhooks) includes loopback.
        self._server = Server(
            uvicorn.Config(
                build_app(config, clock=clock),
                host=config.host,
                port=config.port,
                log_level="warning",
                lifespan="on",
                timeout_graceful_shutdown=2,
            )
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True, name="control plane")
        self._clients: list[httpx.Client] = []

    def start(self, timeout: float = 90) -> ControlPlane:
        Internet.shared().hold(self.config.sandbox_subnet)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the control plane did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 60) -> None:
        """`timeout`: seconds its shutdown may take (stopping many sandboxes takes longer)."""
        for client in self._clients:
            client.close()
        self._server.should_exit = True
        self._thread.join(timeout=timeout)
        if self.config.sandbox_provider == "docker" and self.config.stop_sandboxes_on_exit:
            forget_docker_network(self.config.docker_network)
        Internet.shared().release(self.config.sandbox_subnet, self.config.stop_sandboxes_on_exit)

    def new_user(self, name: str) -> str:
        return asyncio.run(create_key(self.config, name))

    def client(self, key: str | None, **kw: Any) -> httpx.Client:
        """A client of this control plane, closed when it stops."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        client = httpx.Client(
            base_url=self.url, headers=headers, timeout=kw.pop("timeout", 30), **kw
        )
        self._clients.append(client)
        return client


@contextlib.contextmanager
def git_daemon(base: Path, host: str | None = None, url_host: str | None = None) -> Iterator[str]:
    """The bare repositories under `base` served by `git daemon`, on the test internet (as a
    forge is: `git.test`'s address, which sandboxes reach with their default policy) unless
    `host` names another place; yields the clone URL template (`{repository}` in it). A
    sandbox sees none of this machine's files, so a file:// URL would not reach them."""
    port = free_port()
    argv = [
        "git",
        "daemon",
        "--reuseaddr",
        "--export-all",
        f"--base-path={base}",
        f"--port={port}",
        str(base),
    ]
    if host is None:
        internet = Internet.shared()
        host = internet.names["git.test"][0]
        daemon = internet.popen(
            [*argv, f"--listen={host}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    else:
        daemon = subprocess.Popen(
            [*argv, f"--listen={host}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    try:
        wait_for(lambda: _accepts(host, port), 10, what="git daemon")
        yield f"git://{url_host or host}:{port}/{{repository}}.git"
    finally:
        daemon.terminate()
        daemon.wait(10)


def _accepts(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def configure_llm(
    client: httpx.Client, base_url: str, tools: list[str] | None = None, **extra: Any
) -> None:
    body: dict[str, Any] = {
        "llm_model": "openai/test-model",
        "llm_base_url": base_url,
        "llm_api_key": "sk-test-key",
        **extra,
    }
    if tools is not None:
        body["default_tools"] = tools
    r = client.patch("/api/v1/settings", json=body)
    assert r.status_code == 200, r.text


def start(
    client: httpx.Client, text: str | None = None, run: bool = True, **extra: Any
) -> dict[str, Any]:
    """POST a start request and wait for its task to end; returns the task."""
    body: dict[str, Any] = dict(extra)
    if text is not None:
        body["initial_message"] = {
            "role": "user",
            "content": [{"type": "text", "text": text}],
            "run": run,
        }
    r = client.post("/api/v1/app-conversations", json=body)
    assert r.status_code == 201, r.text
    return wait_task(client, r.json()["id"])


def wait_task(client: httpx.Client, task_id: str, timeout: float = 60) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        task = client.get("/api/v1/app-conversations/start-tasks", params={"ids": task_id}).json()[
            0
        ]
        return task if task["status"] in ("READY", "ERROR") else None

    result: dict[str, Any] = wait_for(done, timeout, what=f"start task {task_id}")
    return result


def conversation(client: httpx.Client, conversation_id: str) -> dict[str, Any]:
    r = client.get("/api/v1/app-conversations", params={"ids": conversation_id})
    assert r.status_code == 200, r.text
    record: dict[str, Any] = r.json()[0]
    return record


def whole_run(client: httpx.Client, cid: str) -> list[str]:
    """The stored ids once the run's last event (execution_status: finished) is among them,
    else none: the record says FINISHED (asked of the agent server) before the webhook has
    stored all, and it stores in order, so nothing of the run comes after that one."""
    r = client.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 1000})
    items = r.json()["items"]
    done = any(
        e["kind"] == "ConversationStateUpdateEvent"
        and e["key"] == "execution_status"
        and str(e["value"]).lower() == "finished"
        for e in items
    )
    return [e["id"] for e in items] if done else []


#: The operator key of control planes whose /metrics a test reads (`warm_pool`).
OPERATOR = "operator-key-for-tests-" + "0" * 16


def warm_pool(url: str) -> dict[str, int]:
    """The warm pool's figures as an operator reads them on the /metrics of the control plane
    at `url`: `parked` (waiting), and the starts that asked it, `hit` and `miss` (its
    operator key must be `OPERATOR`)."""
    text = probe.get(
        url + "/metrics", headers={"Authorization": f"Bearer {OPERATOR}"}, timeout=10
    ).text
    samples = {
        "control_plane_warm_pool_parked": "parked",
        'control_plane_warm_pool_claims_total{result="hit"}': "hit",
        'control_plane_warm_pool_claims_total{result="miss"}': "miss",
    }
    found = {"parked": 0, "hit": 0, "miss": 0}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name in samples:
            found[samples[name]] = int(float(value))
    return found


def template_socket(plane: ControlPlane) -> Path:
    return plane.config.state_dir / "template" / "template.sock"


def server_of(plane: ControlPlane, sandbox_id: str) -> int:
    """The sandbox's agent server (host pid): the Python process in its pid namespace."""
    launcher = sandbox_pid(plane, sandbox_id)
    inside = {namespaces.namespace(p) for p in processes.children(launcher)} - {None}
    [server] = [
        p
        for ns in inside
        if ns
        for p in namespaces.members(ns)
        if Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0] == sys.executable.encode()
    ]
    return server


def sandbox_pid(plane: ControlPlane, sandbox_id: str) -> int:
    """The pid the control plane signals: the sandbox's group leader (the agent server, or
    bubblewrap's launcher when isolated), found by its ready file's path on its command line."""
    pid = launcher_pid(plane.config.state_dir / "sandboxes" / sandbox_id)
    assert pid is not None, f"sandbox {sandbox_id} has no process"
    return pid


def launcher_pid(root_dir: Path) -> int | None:
    """bubblewrap's (or the server's) with the ready file's path; runsc's with its bundle's."""
    found = processes.with_argument(str(root_dir / "ready.json")) or processes.with_argument(
        str(gvisor.bundle_of(root_dir))
    )
    leaders = [p.pid for p in found if p.pid == p.pgid]
    return leaders[0] if leaders else None


def agent_sockets(client: httpx.Client, sid: str) -> int:
    """Sockets open on the sandbox's agent server (its /server_info, with its key)."""
    record = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
    info = httpx.get(
        record["exposed_urls"][0]["url"] + "/server_info",
        headers={"X-Session-API-Key": record["session_api_key"]},
        timeout=10,
    )
    count: int = info.json()["websockets"]
    return count


def bare_repository(root: Path, name: str) -> Path:
    """A local 'forge': <root>/<org>/<repo>.git with one commit on main."""
    seed = root / "seed"
    seed.mkdir(parents=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    (seed / "README.md").write_text("# demo\n")
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-qm", "seed"]):
        subprocess.run(["git", *args], cwd=seed, check=True, env=env)
    bare = root / f"{name}.git"
    bare.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(bare)], check=True)
    return bare


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
        r = self.client.get(
            f"/api/v1/conversation/{self.cid}/events/search",
            params={"kind__eq": "ActionEvent", "limit": 100},
        )
        assert r.status_code == 200, r.text
        items: list[dict[str, object]] = r.json()["items"]
        return items


def whole_flow(
    plane: ControlPlane, llm: ScriptedLLM, key: str, llm_host: str | None = None
) -> Flow:
    """From the start request to the sandbox's record, on whatever provider `plane` has;
    `llm_host`: the scripted LLM's name as the sandbox knows it."""
    api_key = plane.new_user("alice")
    client = plane.client(api_key)
    configure_llm(
        client,
        llm.base_url(key, host=llm_host),
        tools=["terminal", "file_editor"],
        git_user_name="Alice",
        git_user_email="alice@example.com",
    )
    llm.script(
        key,
        call("terminal", command="echo 'print(1)' > hello.py && echo more >> README.md"),
        call("finish", message="done"),
    )

    task = start(
        client,
        "Write hello.py",
        selected_repository="acme/demo",
        selected_branch="main",
        title="first",
        observability_tags=["t1"],
        observability_metadata={"team": "core", "ids": [1, 2]},
    )
    assert task["status"] == "READY", task
    cid, sid = task["app_conversation_id"], task["sandbox_id"]

    record = wait_for(
        lambda: (r := conversation(client, cid))["execution_status"] == "finished" and r,
        60,
        what="the run to finish",
    )
    assert record["sandbox_id"] == sid and record["sandbox_status"] == "RUNNING"
    assert record["selected_repository"] == "acme/demo" and record["selected_branch"] == "main"
    assert record["title"] == "first" and record["observability_metadata"] == {
        "team": "core",
        "ids": [1, 2],
    }

    # Events arrive through the webhook and are searched in the control plane's own store.
    actions = Flow(client=client, cid=cid, sid=sid, url="", session="").actions
    two = wait_for(lambda: a if len(a := actions()) >= 2 else [], 30, what="ActionEvents")
    assert [a["tool_name"] for a in two] == ["terminal", "finish"]
    wait_for(
        lambda: (
            conversation(client, cid)["metrics"]["accumulated_token_usage"]["prompt_tokens"] > 0
        ),
        30,
        what="metrics",
    )

    # Work products, read through the sandbox.
    r = client.get(f"/api/v1/app-conversations/{cid}/file", params={"path": "hello.py"})
    assert r.status_code == 200 and r.text == "print(1)\n"
    changes = client.get(f"/api/v1/app-conversations/{cid}/git/changes").json()
    assert {(c["path"], c["status"]) for c in changes} >= {
        ("hello.py", "ADDED"),
        ("README.md", "UPDATED"),
    }
    diff = client.get(f"/api/v1/app-conversations/{cid}/git/diff")
    assert diff.status_code == 200 and "+more" in diff.text
    assert client.get(f"/api/v1/app-conversations/{cid}/skills").status_code == 200
    assert client.get(f"/api/v1/app-conversations/{cid}/hooks").json() == {"hooks": []}

    # A follow-up message runs the agent again.
    llm.script(key, call("finish", message="again"))
    r = client.post(
        f"/api/v1/app-conversations/{cid}/send-message",
        json={"role": "user", "content": [{"type": "text", "text": "once more"}], "run": True},
    )
    assert r.status_code == 200, r.text
    wait_for(lambda: len(actions()) >= 3, 30, what="the follow-up's action")

    r = client.patch(
        f"/api/v1/app-conversations/{cid}", json={"title": "renamed", "tags": {"k": "v"}}
    )
    assert (
        r.status_code == 200 and r.json()["title"] == "renamed" and r.json()["tags"] == {"k": "v"}
    )
    found = client.get(
        "/api/v1/app-conversations/search", params={"title__contains": "NAME"}
    ).json()
    assert [c["id"] for c in found["items"]] == [cid]
    assert client.get("/api/v1/app-conversations/count").json() == 1

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
    exposed = sandbox["exposed_urls"][0]
    assert exposed["name"] == "AGENT_SERVER"  # first; its worker ports (apps) after it
    session = sandbox["session_api_key"]
    assert (
        httpx.get(
            exposed["url"] + f"/api/conversations/{cid}",
            headers={"Authorization": f"Bearer {api_key}"},
        ).status_code
        == 401
    )
    assert (
        httpx.get(
            exposed["url"] + f"/api/conversations/{cid}", headers={"X-Session-API-Key": session}
        ).status_code
        == 200
    )
    assert plane.client(session).get("/api/v1/settings").status_code == 401
    # The git author of the user's settings was given to the sandbox (SPEC 5 rule 5).
    settings = httpx.get(
        exposed["url"] + "/api/settings", headers={"X-Session-API-Key": session}
    ).json()
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
