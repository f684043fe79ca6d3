"""The public reference server (`openhands-agent-server` 1.58.0) in a subprocess, shaped like
`tests.support.server.ServerProcess`, for the benchmark and for checking this tier itself
(`AGENT_SERVER_COMPAT_TARGET=reference`)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx

from tests.support.llm import free_port
from tests.support.server import KEY


class ReferenceServer:
    def __init__(self, python: Path, state_dir: Path) -> None:
        self.python = python
        self.state_dir = state_dir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = state_dir.parent / f"{state_dir.name}-reference.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90) -> ReferenceServer:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "SESSION_API_KEY": KEY,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "OH_SECRET_KEY": "compat-reference-secret-key-0123456789",
            "OH_ENABLE_VSCODE": "false",
            "OH_PRELOAD_TOOLS": "false",
            "OPENHANDS_SUPPRESS_BANNER": "1",
        }
        env.pop("PYTHONPATH", None)
        with open(self.log_path, "ab") as log:
            # Its state paths are relative (workspace/conversations): cwd is the state dir.
            self.proc = subprocess.Popen(
                [
                    str(self.python),
                    "-m",
                    "openhands.agent_server",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                cwd=self.state_dir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"reference server exited with {self.proc.returncode}:\n{self.output()}"
                )
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"reference server not ready after {timeout}s:\n{self.output()}")

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"X-Session-API-Key": KEY}, timeout=30)
