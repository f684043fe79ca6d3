"""POST /api/conversations/{id}/commands: set-up commands in the workspace, bounded and masked."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import create
from tests.support.llm import ScriptedLLM
from tests.support.wait import wait_for

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

SECRET = "s3cr3t-value-4242"


def run(client: httpx.Client, cid: str, command: str, **extra: Any) -> dict[str, Any]:
    r = client.post(f"/api/conversations/{cid}/commands", json={"command": command, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def gone(pid: int) -> bool:
    """No such process, or only its zombie (nothing runs any more)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_runs_in_the_workspace_with_exit_code_and_streams(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "file.txt").write_text("x")
    cid = create(client, llm, key, tmp_path)["id"]
    out = run(client, cid, "pwd; echo to-err >&2; exit 3")
    assert out == {
        "exit_code": 3,
        "stdout": f"{os.path.realpath(tmp_path)}\n",
        "stderr": "to-err\n",
        "timed_out": False,
    }
    assert run(client, cid, "pwd", cwd="sub")["stdout"].strip().endswith("/sub")
    assert run(client, cid, "pwd", cwd=str(tmp_path / "sub"))["exit_code"] == 0

    env = run(
        client,
        cid,
        'echo "$FOO|${SESSION_API_KEY:-none}|$GIT_AUTHOR_NAME|$TERM"',
        env={"FOO": "bar"},
    )
    assert env["stdout"] == "bar|none|agent-server|dumb\n"  # the server's key is never passed on

    url = f"/api/conversations/{cid}/commands"
    assert client.post(url, json={"command": "pwd", "cwd": "../"}).status_code == 403
    assert client.post(url, json={"command": "pwd", "cwd": "missing"}).status_code == 404
    assert client.post(url, json={"command": "pwd", "cwd": "file.txt"}).status_code == 409
    for bad in (
        {},
        {"command": ""},
        {"command": "x", "timeout": 0},
        {"command": "x", "timeout": 601},
        {"command": "x", "env": {"1BAD": "v"}},
    ):
        r = client.post(url, json=bad)
        assert r.status_code == 422, (bad, r.text)
        assert r.json()["detail"][0]["loc"][0] == "body"


def test_secrets_are_in_the_environment_and_masked_in_the_output(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    cid = create(client, llm, key, tmp_path, secrets={"API_TOKEN": SECRET})["id"]
    out = run(
        client,
        cid,
        'echo "token=$API_TOKEN"; echo "$API_TOKEN" >&2; '
        'test "$API_TOKEN" = ' + SECRET[:6] + '"${API_TOKEN:6}" && echo same',
    )
    assert out["stdout"] == "token=<secret-hidden>\nsame\n"
    assert out["stderr"] == "<secret-hidden>\n"
    # A secret printed across the output cap is masked whole, not cut into a visible prefix.
    out = run(client, cid, "head -c 99990 /dev/zero | tr '\\0' a; echo \"$API_TOKEN\"; echo tail")
    assert SECRET[:4] not in out["stdout"] and "output truncated" in out["stdout"]
    assert SECRET not in json.dumps(client.get(f"/api/conversations/{cid}").json())


def test_timeout_kills_the_process_group(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    cid = create(client, llm, key, tmp_path)["id"]
    started = time.monotonic()
    out = run(
        client,
        cid,
        "echo $$ > group; sleep 30 & echo $! > child; echo started; sleep 30",
        timeout=1,
    )
    assert time.monotonic() - started < 10
    assert out["timed_out"] is True and out["exit_code"] < 0 and out["stdout"] == "started\n"
    group = int((tmp_path / "group").read_text())
    child = int((tmp_path / "child").read_text())
    wait_for(lambda: gone(child) and gone(group), timeout=5, what="the command's processes to end")


def test_background_leftovers_end_with_the_command(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    cid = create(client, llm, key, tmp_path)["id"]
    started = time.monotonic()
    out = run(client, cid, "sleep 30 & echo $!")
    assert out["exit_code"] == 0 and not out["timed_out"]
    assert time.monotonic() - started < 10
    wait_for(lambda: gone(int(out["stdout"])), timeout=5, what="the background sleep to end")


def test_output_is_capped_with_a_note(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    cid = create(client, llm, key, tmp_path)["id"]
    out = run(client, cid, "head -c 300000 /dev/zero | tr '\\0' a; head -c 5000 /dev/zero >&2")
    assert out["stdout"].startswith("a" * 100_000)
    assert "[output truncated: 300000 bytes in all, the first 100000 shown]" in out["stdout"]
    assert len(out["stdout"]) < 100_200 and len(out["stderr"]) == 5000


def test_a_secret_cut_by_the_output_cap_is_not_shown_in_part(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    secret = "supersecret-1234567890"
    conv = create(client, llm, key, tmp_path, secrets={"TOK": secret})
    # Multibyte characters before the secret move the character cut past the byte cut.
    result = run(
        client,
        conv["id"],
        "python3 -c \"print('€' * 33335, end='')\"; printf %s \"$TOK\"; printf 'x%.0s' {1..10}",
    )
    assert "output truncated" in result["stdout"]
    for k in range(4, len(secret) + 1):
        assert secret[:k] not in result["stdout"]


def test_processes_that_leave_the_group_are_killed_and_output_kept(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    conv = create(client, llm, key, tmp_path)
    pids = tmp_path / "pids"
    command = (
        f"set -m; sleep 771 & echo $! > {pids}; setsid sleep 772 & "
        f"sleep 0.2; pgrep -f 'sleep 772' >> {pids}; echo started; sleep 100"
    )
    result = run(client, conv["id"], command, timeout=2)
    assert result["timed_out"] and "started" in result["stdout"]
    for pid in (int(p) for p in pids.read_text().split()):
        wait_for(lambda pid=pid: gone(pid), timeout=10, what=f"process {pid} to end")
