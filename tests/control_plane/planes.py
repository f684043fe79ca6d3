"""`python -m control_plane` in a subprocess (the only way to SIGKILL one), alone or several
on one database."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from control_plane.store import Database
from core import processes
from tests.control_plane.support import launcher_pid
from tests.support import probe
from tests.support.internet import Internet, forget_docker_network
from tests.support.llm import free_port
from tests.support.wait import wait_for


class PlaneProcess:
    def __init__(self, state_dir: Path, module: str = "control_plane", **settings: str) -> None:
        """`settings`: more CONTROL_PLANE_* variables, by field name (database_url=...);
        `module`: what runs it (`tests.support.demo`: `make demo`)."""
        self.state_dir = state_dir
        self.module = module
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        internet = Internet.shared()  # as make_config: the deployment's subnet, its DNS
        deployment = settings.get("database_url") or str(state_dir)
        network = {
            "sandbox_subnet": str(internet.subnet(deployment)),
            "docker_network": internet.docker_network(deployment),
            "sandbox_dns_upstream": internet.dns,
        }
        self.env = {
            **os.environ,
            "CONTROL_PLANE_STATE_DIR": str(state_dir),
            "CONTROL_PLANE_PORT": str(self.port),
            "CONTROL_PLANE_HEALTH_INTERVAL": "0.5",
            "CONTROL_PLANE_STOP_SANDBOXES_ON_EXIT": "true",
            "CONTROL_PLANE_LOG_LEVEL": "warning",
            # As make_config: no template unless a test asks (seconds of CPU each).
            "CONTROL_PLANE_SANDBOX_TEMPLATE": "false",
            **{"CONTROL_PLANE_" + k.upper(): v for k, v in {**network, **settings}.items()},
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.subnet = internet.subnet(deployment)
        self._held = False

    def start(self, wait: bool = True) -> PlaneProcess:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if not self._held:
            Internet.shared().hold(self.subnet)
            self._held = True
        log = open(self.log_file, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        if wait:
            self.wait_up()
        return self

    @property
    def log_file(self) -> Path:
        """Its output (stdout and stderr)."""
        return self.state_dir.parent / f"control-plane-{self.state_dir.name}.log"

    def wait_up(self) -> None:
        wait_for(lambda: self._up(), 60, what="the control plane")

    def _up(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, "the control plane exited"
        try:
            return probe.get(self.url + "/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()  # SIGKILL to the control plane alone: its sandboxes live on
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None and self.proc.poll() is not None:
            # It ended by itself, not by kill(): what it said is shown with a failed test.
            tail = self.log_file.read_bytes()[-4000:].decode(errors="replace")
            print(f"control plane {self.state_dir.name} exited ({self.proc.returncode}):\n{tail}")
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.env.get("CONTROL_PLANE_SANDBOX_PROVIDER") == "docker":
            forget_docker_network(self.env["CONTROL_PLANE_DOCKER_NETWORK"])
        if self._held:
            self._held = False
            Internet.shared().release(
                self.subnet, self.env["CONTROL_PLANE_STOP_SANDBOXES_ON_EXIT"] == "true"
            )

    def new_key(self, user: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "control_plane", "keys", "create", "--user", user],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()


def sandbox_pids(state_dir: Path) -> dict[str, int]:
    """Each sandbox's pid as the control plane signals it (`support.launcher_pid`)."""
    pids = {}
    for root in (state_dir / "sandboxes").glob("*/"):
        if (pid := launcher_pid(root)) is not None:
            pids[root.name] = pid
    return pids


def kill_sandboxes(state_dir: Path) -> None:
    """Whatever a failed test left behind."""
    for pid in sandbox_pids(state_dir).values():
        processes.signal_group(pid, signal.SIGKILL)


def several(root: Path, database_url: str, n: int = 2, **settings: str) -> list[PlaneProcess]:
    """`n` control planes on one database (one secret key, as a deployment has), started
    together. Every sandbox's webhook goes to the first: a batch for a conversation another
    process placed lands there (as behind a load balancer, where any process may get it)."""
    from cryptography.fernet import Fernet

    secret = Fernet.generate_key().decode()
    planes = [
        PlaneProcess(root / f"cp{i}", database_url=database_url, secret_key=secret, **settings)
        for i in range(n)
    ]
    for plane in planes:
        plane.env["CONTROL_PLANE_PUBLIC_URL"] = planes[0].url
        plane.start(wait=False)
    for plane in planes:
        plane.wait_up()
    return planes


def query(url: str, statement: Any) -> list[Any]:
    """The rows `statement` reads from the database at `url` (what the planes stored)."""

    async def run() -> list[Any]:
        db = Database(url)
        try:
            async with db.connect() as conn:
                return list(await conn.execute(statement))
        finally:
            await db.close()

    return asyncio.run(run())
