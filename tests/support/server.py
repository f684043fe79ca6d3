"""The real agent server in a subprocess on a loopback port, for tests and benches."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support import probe
from tests.support.llm import free_port

KEY = "test-session-key"


class ServerProcess:
    """`python -m agent_server` with its own state dir; restartable, killable."""

    def __init__(
        self,
        state_dir: Path,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        tree: Path | None = None,
    ) -> None:
        """`tree`: the project copy whose `agent_server` runs (default: this one)."""
        self.state_dir = state_dir
        self.tree = tree
        self.port = free_port()
        self.extra_env = env or {}
        self.args = args or []
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = state_dir.parent / f"{state_dir.name}-server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> ServerProcess:
        env = {
            **os.environ,
            "SESSION_API_KEY": KEY,
            "AGENT_SERVER_STATE_DIR": str(self.state_dir),
            "AGENT_SERVER_PORT": str(self.port),
            "AGENT_SERVER_LOG_LEVEL": "info",
            **self.extra_env,
        }
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the handle
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agent_server", *self.args],
                cwd=self.tree,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if probe.get(self.url + "/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"server not ready after {timeout}s:\n{self.output()}")

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.killpg(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(5)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs (the crash case)."""
        self.stop(signal.SIGKILL)

    def client(self, **kw: Any) -> httpx.Client:
        kw.setdefault("timeout", 30)
        return httpx.Client(base_url=self.url, headers={"X-Session-API-Key": KEY}, **kw)
