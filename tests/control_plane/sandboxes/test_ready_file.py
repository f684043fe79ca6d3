"""agent-server --ready-file / AGENT_SERVER_READY_FILE: how a supervisor learns the port the OS
picked (--port 0) and the pid, once the server answers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e


def test_ready_file_reports_the_bound_port(tmp_path: Path) -> None:
    for how in ("flag", "variable"):
        ready = tmp_path / how / "ready.json"
        env = {
            **os.environ,
            "SESSION_API_KEY": "k",
            "AGENT_SERVER_STATE_DIR": str(tmp_path / how),
            "AGENT_SERVER_PORT": "0",
        }
        args = [sys.executable, "-m", "agent_server"]
        if how == "flag":
            args += ["--ready-file", str(ready)]
        else:
            env["AGENT_SERVER_READY_FILE"] = str(ready)
        proc = subprocess.Popen(
            args,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            wait_for(ready.exists, 30, what="the ready file")
            data = json.loads(ready.read_text())
            assert data["pid"] == proc.pid and data["port"] > 0
            assert httpx.get(f"http://127.0.0.1:{data['port']}/alive").status_code == 200
            assert oct(ready.stat().st_mode & 0o777) == oct(0o600)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)


def test_ready_fd_says_the_port_once_serving_then_closes(tmp_path: Path) -> None:
    """--ready-fd / AGENT_SERVER_READY_FD: the ready file's JSON on a pipe, written once the
    server answers, then the pipe closed (its reader wakes at once and polls nothing)."""
    for how in ("flag", "variable"):
        read, write = os.pipe()
        env = {
            **os.environ,
            "SESSION_API_KEY": "k",
            "AGENT_SERVER_STATE_DIR": str(tmp_path / how),
            "AGENT_SERVER_PORT": "0",
        }
        args = [sys.executable, "-m", "agent_server"]
        if how == "flag":
            args += ["--ready-fd", str(write)]
        else:
            env["AGENT_SERVER_READY_FD"] = str(write)
        proc = subprocess.Popen(
            args,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=[write],
        )
        os.close(write)
        try:
            with os.fdopen(read, "rb") as said:
                data = json.loads(said.read())  # to its end: the server closed it
            assert data["pid"] == proc.pid and data["port"] > 0
            assert httpx.get(f"http://127.0.0.1:{data['port']}/alive").status_code == 200
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
