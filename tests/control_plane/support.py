"""The control plane under test: a real uvicorn server in a thread on a free loopback port (the
sandboxes it starts must reach its webhook), and small helpers for its API."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from control_plane.__main__ import create_key
from control_plane.app import Server, build_app
from control_plane.config import Config
from control_plane.sandboxes import procfs
from core.retry import Clock
from tests.support.llm import free_port
from tests.support.wait import wait_for


class ShiftedClock(Clock):
    """The system's time, moved on by `offset` seconds when the test says so (the lifecycle's
    timers come due without waiting; time still passes)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset


def make_config(state_dir: Path, database_url: str | None = None, host: str = "127.0.0.1",
                **extra: Any) -> Config:
    port = free_port()
    defaults: dict[str, Any] = {"stop_sandboxes_on_exit": True, "health_interval": 0.5,
                                "sandbox_stop_grace": 2.0}
    return Config(host=host, port=port, state_dir=state_dir, database_url=database_url,
                  **{**defaults, **extra})


class ControlPlane:
    def __init__(self, config: Config, clock: Clock | None = None) -> None:
        self.config = config
        self.url = f"http://127.0.0.1:{config.port}"
        # Listening on the config's host (0.0.0.0 for containers' webhooks) includes loopback.
        self._server = Server(uvicorn.Config(build_app(config, clock=clock), host=config.host,
                                                     port=config.port, log_level="warning",
                                                     lifespan="on", timeout_graceful_shutdown=2))
        self._thread = threading.Thread(target=self._server.run, daemon=True, name="control plane")
        self._clients: list[httpx.Client] = []

    def start(self, timeout: float = 30) -> ControlPlane:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the control plane did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        for client in self._clients:
            client.close()
        self._server.should_exit = True
        self._thread.join(timeout=60)

    def new_user(self, name: str) -> str:
        return asyncio.run(create_key(self.config, name))

    def client(self, key: str | None, **kw: Any) -> httpx.Client:
        """A client of this control plane, closed when it stops."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        client = httpx.Client(base_url=self.url, headers=headers, timeout=kw.pop("timeout", 30), **kw)
        self._clients.append(client)
        return client


@contextlib.contextmanager
def git_daemon(base: Path, host: str = "127.0.0.1", url_host: str | None = None) -> Iterator[str]:
    """The bare repositories under `base` served by `git daemon` on `host`; yields the clone
    URL template (`{repository}` in it). A sandbox sees none of this machine's files, so a
    file:// URL would not reach them."""
    port = free_port()
    daemon = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all",
                               f"--base-path={base}", f"--listen={host}", f"--port={port}",
                               str(base)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def configure_llm(client: httpx.Client, base_url: str, tools: list[str] | None = None,
                  **extra: Any) -> None:
    body: dict[str, Any] = {"llm_model": "openai/test-model", "llm_base_url": base_url,
                            "llm_api_key": "sk-test-key", **extra}
    if tools is not None:
        body["default_tools"] = tools
    r = client.patch("/api/v1/settings", json=body)
    assert r.status_code == 200, r.text


def start(client: httpx.Client, text: str | None = None, run: bool = True, **extra: Any) -> dict[str, Any]:
    """POST a start request and wait for its task to end; returns the task."""
    body: dict[str, Any] = dict(extra)
    if text is not None:
        body["initial_message"] = {"role": "user", "content": [{"type": "text", "text": text}],
                                   "run": run}
    r = client.post("/api/v1/app-conversations", json=body)
    assert r.status_code == 201, r.text
    return wait_task(client, r.json()["id"])


def wait_task(client: httpx.Client, task_id: str, timeout: float = 60) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        task = client.get("/api/v1/app-conversations/start-tasks", params={"ids": task_id}).json()[0]
        return task if task["status"] in ("READY", "ERROR") else None
    result: dict[str, Any] = wait_for(done, timeout, what=f"start task {task_id}")
    return result


def conversation(client: httpx.Client, conversation_id: str) -> dict[str, Any]:
    r = client.get("/api/v1/app-conversations", params={"ids": conversation_id})
    assert r.status_code == 200, r.text
    record: dict[str, Any] = r.json()[0]
    return record


def sandbox_pid(plane: ControlPlane, sandbox_id: str) -> int:
    """The pid the control plane signals: the sandbox's group leader (the agent server, or
    bubblewrap's launcher when isolated), found by its ready file's path on its command line."""
    pid = launcher_pid(plane.config.state_dir / "sandboxes" / sandbox_id)
    assert pid is not None, f"sandbox {sandbox_id} has no process"
    return pid


def launcher_pid(root_dir: Path) -> int | None:
    leaders = [pid for pid, group in procfs.with_argument(str(root_dir / "ready.json"))
               if pid == group]
    return leaders[0] if leaders else None
