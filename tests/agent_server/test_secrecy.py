"""The server's keys out of reach of what it runs (agent_server.secrecy), tried as its children
would: a non-root process the server started (here through /api/bash) reads the server's
/proc/<pid>/environ and opens its memory; neither gives the key, though the server was started
with it in its environment. And a launcher's pipe: the keys never appear in the environment."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from control_plane.providers.process.isolation import Bubblewrap
from control_plane.providers.process.spawn import spawn, wait
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

KEY = "sk-session-" + "k" * 24
WEBHOOK_SECRET = "whsec-" + "s" * 24
#: Run as root, the server runs as a uid of this range (a sandbox's): its children are not root.
UIDS = (1_879_113_000, 1_879_113_015)


@pytest.fixture
def root_dir() -> Iterator[Path]:
    """Outside pytest's 0700 directories: the server's own user must reach it."""
    base = Path(tempfile.mkdtemp(prefix="secrecy-"))
    (base / "sandbox").mkdir()
    yield base / "sandbox"
    shutil.rmtree(base, ignore_errors=True)


def serve(root_dir: Path, env: dict[str, str], stdin: bytes = b"") -> tuple[int, str]:
    """The agent server as the process provider starts it (in bubblewrap, as a uid of its own
    when the tests run as root; as the tests' own user otherwise); (its launcher's pid, URL)."""
    ready = root_dir / "ready.json"
    argv = [sys.executable, "-m", "agent_server", "--ready-file", str(ready)]
    files: dict[int, bytes] = {}
    if os.geteuid() == 0:
        (root_dir / "home").mkdir()
        (root_dir / "workspace").mkdir(exist_ok=True)
        isolation = Bubblewrap(
            bwrap=shutil.which("bwrap") or "bwrap",
            hidden=(),
            uids=UIDS,
            setpriv=shutil.which("setpriv") or "setpriv",
        )
        command = isolation.command(root_dir, argv, isolation.own(root_dir), {})
        argv, files = command.argv, command.files
    env = {
        "PATH": os.environ["PATH"],
        "AGENT_SERVER_PORT": "0",
        "AGENT_SERVER_STATE_DIR": str(root_dir / "state"),
        **env,
    }
    with open(root_dir.parent / f"{root_dir.name}.log", "wb") as log:
        pid = spawn(argv, env, output=log.fileno(), stdin=stdin, files=files)
    try:
        port = wait_for(
            lambda: ready.exists() and json.loads(ready.read_text())["port"],
            30,
            what="the ready file",
        )
    except AssertionError:
        stop(pid)
        raise
    return pid, f"http://127.0.0.1:{port}"


def stop(pid: int) -> None:
    """The sandbox gone, all of it: what ran as its uid dies with its pid namespace, a moment
    after bubblewrap (the next test would find the uid still in use)."""
    os.killpg(pid, signal.SIGKILL)
    wait(pid, 10)
    wait_for(
        lambda: (
            not [
                p
                for p in Path("/proc").iterdir()
                if p.name.isdigit() and _uid(p) in range(UIDS[0], UIDS[1] + 1)
            ]
        ),
        30,
        what="the sandbox gone",
    )


def _uid(proc: Path) -> int | None:
    """Its real uid (/proc/<pid> of a process that is not dumpable belongs to root)."""
    try:
        for line in (proc / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def bash(url: str, command: str) -> dict[str, object]:
    r = httpx.post(
        url + "/api/bash/execute_bash_command",
        json={"command": command},
        headers={"X-Session-API-Key": KEY},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    result: dict[str, object] = r.json()
    return result


def test_a_non_root_child_reads_no_key_of_the_server(root_dir: Path) -> None:
    pid, url = serve(
        root_dir, {"SESSION_API_KEY": KEY, "AGENT_SERVER_WEBHOOK_SECRET": WEBHOOK_SECRET}
    )
    try:
        me = bash(url, "id -u; tr '\\0' ' ' < /proc/$PPID/cmdline")
        uid, cmdline = str(me["stdout"]).split("\n", 1)
        assert int(uid) != 0 and "agent_server" in cmdline  # a non-root child of the server
        for command in (
            "cat /proc/$PPID/environ",
            'python3 -c \'import os; print(open(f"/proc/{os.getppid()}/mem", "rb"))\'',
        ):
            result = bash(url, command)
            said = f"{result['stdout']}{result['stderr']}"
            assert result["exit_code"] != 0 and "ermission denied" in said, (command, result)
            assert KEY not in said and WEBHOOK_SECRET not in said
    finally:
        stop(pid)


def test_keys_over_a_pipe_are_in_no_environment(root_dir: Path) -> None:
    keys = {"SESSION_API_KEY": KEY, "AGENT_SERVER_WEBHOOK_SECRET": WEBHOOK_SECRET}
    pid, url = serve(root_dir, {"AGENT_SERVER_KEYS_FD": "0"}, json.dumps(keys).encode())
    try:
        assert httpx.get(url + "/api/conversations/search").status_code == 401
        assert (
            httpx.get(
                url + "/api/conversations/search", headers={"X-Session-API-Key": KEY}
            ).status_code
            == 200
        )
        # Not in the environment of any process from the launcher down (read as root here),
        # nor in their command lines.
        for proc in [pid, *_descendants(pid)]:
            for name in ("environ", "cmdline"):
                data = Path(f"/proc/{proc}/{name}").read_bytes() if os.geteuid() == 0 else b""
                assert KEY.encode() not in data and WEBHOOK_SECRET.encode() not in data
    finally:
        stop(pid)


@pytest.mark.parametrize(
    "handoff",
    [
        b"not json",
        b'{"CONTROL_PLANE_SECRET_KEY": "sk-xyz"}',
        b'{"SESSION_API_KEY": 7}',
        b"[" * 70_000,
    ],
)
def test_a_bad_handoff_is_refused_in_one_line(tmp_path: Path, handoff: bytes) -> None:
    env = {
        **os.environ,
        "AGENT_SERVER_KEYS_FD": "0",
        "AGENT_SERVER_PORT": "0",
        "AGENT_SERVER_STATE_DIR": str(tmp_path / "state"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "agent_server"],
        input=handoff,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    [line] = done.stderr.decode().splitlines()
    assert line.startswith("agent-server: AGENT_SERVER_KEYS_FD=0: "), line
    assert "sk-xyz" not in line and "Traceback" not in line


def _descendants(pid: int) -> list[int]:
    found, parents = [], {pid}
    while True:
        more = [
            int(p)
            for p in os.listdir("/proc")
            if p.isdigit() and int(p) not in found and _parent(int(p)) in parents
        ]
        if not more:
            return found
        found += more
        parents.update(more)


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(stat[stat.rfind(b")") + 2 :].split()[1])
