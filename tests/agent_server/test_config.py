"""Starting the server: flags over variables, the generated key, refusals, and the request log.

These tests start their own servers (each with the environment or flags under test) and keep
stdout and stderr apart, since what goes where is part of the contract.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import agent_spec
from tests.support.llm import ScriptedLLM, free_port
from tests.support.server import KEY
from tests.support.wait import wait_for

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

HEADER = "X-Session-API-Key"
#: One request-log line: method, path, status, milliseconds (agent_server.access).
ACCESS = re.compile(r"agent_server\.access: (\S+) (\S+) (\d{3}) (\d+(?:\.\d+)?)ms$")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any of the server's own variables."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "SESSION_API_KEY" and not k.startswith("AGENT_SERVER_")
    }
    env.update(extra)
    return env


class Spawned:
    """`python -m agent_server ...` with stdout and stderr in separate files."""

    def __init__(self, tmp: Path, args: list[str], env: dict[str, str]) -> None:
        self.out_path, self.err_path = tmp / "stdout.txt", tmp / "stderr.txt"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agent_server", *args],
                env=env,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def wait_ready(self, url: str, timeout: float = 30) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"exited with {self.proc.returncode}:\n{self.stderr}")
            try:
                return httpx.get(url + "/ready", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, timeout=timeout, interval=0.02, what=f"{url}/ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator:
    started: list[Spawned] = []

    def start(args: list[str], env: dict[str, str]) -> Spawned:
        run_dir = tmp_path / f"run{len(started)}"
        run_dir.mkdir()
        started.append(Spawned(run_dir, args, env))
        return started[-1]

    yield start
    for s in started:
        s.stop()


def test_help_lists_the_flags() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "agent_server", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert r.returncode == 0, r.stderr
    for flag in (
        "--host",
        "--port",
        "--state-dir",
        "--log-level",
        "--working-dir",
        "--webhook-url",
    ):
        assert flag in r.stdout, flag
    for variable in ("AGENT_SERVER_HOST", "AGENT_SERVER_PORT", "AGENT_SERVER_STATE_DIR"):
        assert variable in r.stdout, variable


def test_flags_override_their_variables(spawn, tmp_path: Path) -> None:
    flag_port, env_port = free_port(), free_port()
    flag_dir, env_dir = tmp_path / "flag-state", tmp_path / "env-state"
    server = spawn(
        ["--port", str(flag_port), "--state-dir", str(flag_dir)],
        clean_env(
            SESSION_API_KEY=KEY,
            AGENT_SERVER_PORT=str(env_port),
            AGENT_SERVER_STATE_DIR=str(env_dir),
        ),
    )
    url = f"http://127.0.0.1:{flag_port}"
    server.wait_ready(url)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{env_port}/health", timeout=2)
    r = httpx.patch(url + "/api/settings", json={"git_user_name": "flag"}, headers={HEADER: KEY})
    assert r.status_code == 200, r.text
    assert (flag_dir / "settings.json").is_file()
    assert not env_dir.exists()


def test_variables_apply_without_flags(spawn, tmp_path: Path) -> None:
    port, state, work = free_port(), tmp_path / "state", tmp_path / "default-work"
    server = spawn(
        [],
        clean_env(
            SESSION_API_KEY=KEY,
            AGENT_SERVER_PORT=str(port),
            AGENT_SERVER_STATE_DIR=str(state),
            AGENT_SERVER_WORKING_DIR=str(work),
        ),
    )
    url = f"http://127.0.0.1:{port}"
    server.wait_ready(url)
    r = httpx.post(
        url + "/api/conversations",
        headers={HEADER: KEY},
        json={"agent": {"llm": {"model": "openai/m"}}},
    )
    assert r.status_code == 201, r.text
    assert r.json()["workspace"]["working_dir"] == str(work)
    assert work.is_dir() and (state / "conversations").is_dir()


def test_without_a_key_one_is_generated_printed_once_on_stderr_and_works(
    spawn, tmp_path: Path
) -> None:
    port = free_port()
    server = spawn(["--port", str(port), "--state-dir", str(tmp_path / "state")], clean_env())
    url = f"http://127.0.0.1:{port}"
    server.wait_ready(url)
    found = re.findall(r"key is (\S+)", server.stderr)
    assert len(found) == 1, server.stderr
    generated = found[0]
    assert len(generated) >= 32
    assert generated not in server.stdout
    assert server.stderr.count(generated) == 1
    assert httpx.get(url + "/api/settings", headers={HEADER: generated}).status_code == 200
    assert httpx.get(url + "/api/settings", headers={HEADER: KEY}).status_code == 401
    assert httpx.get(url + "/api/settings").status_code == 401
    time.sleep(0.2)  # the request log of the calls above
    assert server.stderr.count(generated) == 1


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_listening_beyond_loopback_without_a_key_is_refused(tmp_path: Path, how: str) -> None:
    port = free_port()
    args = ["--port", str(port), "--state-dir", str(tmp_path / "state")]
    env = clean_env()
    if how == "flag":
        args += ["--host", "0.0.0.0"]
    else:
        env["AGENT_SERVER_HOST"] = "0.0.0.0"
    r = subprocess.run(
        [sys.executable, "-m", "agent_server", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert r.returncode != 0
    assert "SESSION_API_KEY" in r.stderr and "0.0.0.0" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--port", "70000"], {}, "port"),
        ([], {"AGENT_SERVER_PORT": "eighty"}, "port"),
        (["--port", "abc"], {}, "--port"),
    ],
    ids=["port out of range", "port variable not a number", "port flag not a number"],
)
def test_a_bad_setting_is_refused_with_a_message(
    tmp_path: Path, args: list[str], env: dict[str, str], named: str
) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "agent_server", "--state-dir", str(tmp_path / "state"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(SESSION_API_KEY=KEY, **env),
    )
    assert r.returncode != 0
    assert named in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_request_log_has_one_line_per_request_and_no_secrets(
    spawn, tmp_path: Path, llm: ScriptedLLM
) -> None:
    # The log of a run (litellm's included) is checked for keys in test_api, whose server runs
    # agents anyway; a first LLM call in a fresh server costs seconds.
    port, llm_key = free_port(), f"sk-llm-{uuid.uuid4().hex}"
    server = spawn(
        ["--port", str(port), "--state-dir", str(tmp_path / "state")],
        clean_env(SESSION_API_KEY=KEY),
    )
    url = f"http://127.0.0.1:{port}"
    server.wait_ready(url)
    marker = str(uuid.uuid4())
    with httpx.Client(base_url=url, headers={HEADER: KEY}, timeout=30) as c:
        r = c.get(f"/api/conversations/{marker}", params={"session_api_key": KEY, "x": "qs"})
        assert r.status_code == 404
        assert c.get("/api/settings", params={"session_api_key": KEY}).status_code == 200
        assert c.get("/api/settings", headers={HEADER: "wrong"}).status_code == 401
        r = c.patch("/api/settings", json={"agent": {"llm": {"model": "m", "api_key": llm_key}}})
        assert r.status_code == 200
        spec = agent_spec(llm, "config", api_key=llm_key)
        r = c.post(
            "/api/conversations",
            json={
                "agent": spec,
                "workspace": {"working_dir": str(tmp_path / "ws")},
                "initial_message": {"content": [{"type": "text", "text": "go"}], "run": False},
            },
        )
        assert r.status_code == 201, r.text
        r = c.post("/api/conversations", json={"agent": {**spec, "tools": [{"name": "nope"}]}})
        assert r.status_code == 422
    server.stop()
    log = server.stderr
    lines = [m.groups() for m in map(ACCESS.search, log.splitlines()) if m]
    assert lines, log
    assert [line[:3] for line in lines if marker in line[1]] == [
        ("GET", f"/api/conversations/{marker}", "404")
    ]
    settings_lines = [line[:3] for line in lines if line[1] == "/api/settings"]
    assert settings_lines == [
        ("GET", "/api/settings", "200"),
        ("GET", "/api/settings", "401"),
        ("PATCH", "/api/settings", "200"),
    ]
    assert [line[:3] for line in lines if line[1] == "/api/conversations"] == [
        ("POST", "/api/conversations", "201"),
        ("POST", "/api/conversations", "422"),
    ]
    assert all(float(line[3]) >= 0 for line in lines)
    assert not any("?" in line[1] for line in lines)
    for secret in (KEY, llm_key, "session_api_key", "x=qs"):
        assert secret not in log, secret
    assert KEY not in server.stdout and llm_key not in server.stdout


def test_a_malformed_delivery_variable_is_a_clear_error(tmp_path: Path) -> None:
    env = clean_env(SESSION_API_KEY=KEY, AGENT_SERVER_WEBHOOK_BATCH_EVENTS="lots")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent_server",
            "--port",
            str(free_port()),
            "--state-dir",
            str(tmp_path / "state"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "webhook_batch_events" in result.stderr
    assert "Traceback" not in result.stderr


def test_every_setting_has_a_flag_that_wins_over_its_variable(tmp_path: Path) -> None:
    from agent_server.__main__ import load_config
    from agent_server.config import DeliverySettings

    os.environ["AGENT_SERVER_WS_QUEUE_EVENTS"] = "11"
    try:
        config = load_config(
            [
                "--state-dir",
                str(tmp_path),
                "--ws-queue-events",
                "7",
                "--webhook-batch-ms",
                "5",
                "--chromium",
                "/opt/chromium",
                "--terminal-idle-timeout",
                "9",
                "--max-file-bytes",
                "1234",
            ]
        )
        untouched = load_config(["--state-dir", str(tmp_path)])
    finally:
        del os.environ["AGENT_SERVER_WS_QUEUE_EVENTS"]
    assert config.delivery.ws_queue_events == 7 and untouched.delivery.ws_queue_events == 11
    assert config.delivery.webhook_batch_ms == 5.0
    assert (config.chromium, config.terminal_idle_timeout, config.max_file_bytes) == (
        "/opt/chromium",
        9.0,
        1234,
    )
    assert untouched.delivery.webhook_batch_ms == DeliverySettings().webhook_batch_ms


def test_the_server_runs_on_asyncios_own_loop(tmp_path: Path) -> None:
    """Not uvloop, which starts each command (git, ripgrep, a hook, /commands) with a fork()
    of the whole server, litellm and all: 25 ms a command against 8 on asyncio's loop, whose
    vfork() copies nothing (`bench/server_commands.py`)."""
    from tests.support.server import ServerProcess

    server = ServerProcess(tmp_path / "state").start()
    try:
        assert server.proc is not None
        with server.client() as client:
            assert client.get("/api/conversations/count").status_code == 200
        maps = Path(f"/proc/{server.proc.pid}/maps").read_text()
    finally:
        server.stop()
    assert "uvloop" not in maps
