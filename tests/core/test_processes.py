"""core.processes against real children: what a run leaves behind, what it shows, what it
inherits."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.processes import (
    child_env,
    find_process,
    group_members,
    list_processes,
    run_process,
)
from tests.support.wait import wait_for

SH = "/bin/sh"


def alive(pid: int) -> bool:
    """Running (a zombie only waits to be collected: it runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


async def wait_for_file(path: Path, within: float = 5.0) -> int:
    deadline = time.monotonic() + within
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} never written"
        await asyncio.sleep(0.02)
    return int(path.read_text())


async def test_exit_code_output_and_stdin(tmp_path: Path) -> None:
    done = await run_process(
        [SH, "-c", "cat; echo err >&2; exit 3"],
        tmp_path,
        child_env(),
        10,
        stdin=b'{"hook": "input"}',
    )
    assert (done.exit_code, done.timed_out) == (3, False)
    assert done.stdout.head == b'{"hook": "input"}' and done.stderr.head == b"err\n"


async def test_a_child_that_ignores_its_stdin_is_fine(tmp_path: Path) -> None:
    done = await run_process(
        [SH, "-c", "exit 0"], tmp_path, child_env(), 10, stdin=b"x" * 1_000_000
    )
    assert done.exit_code == 0


async def test_output_is_capped_but_counted(tmp_path: Path) -> None:
    done = await run_process(
        [SH, "-c", "head -c 200000 /dev/zero | tr '\\0' a"], tmp_path, child_env(), 10, keep=1000
    )
    assert done.stdout.head == b"a" * 1000 and done.stdout.total == 200_000


async def test_a_child_that_daemonises_is_killed_when_the_run_ends(tmp_path: Path) -> None:
    # Double fork and a new session: it leaves both the process group and the session.
    daemon = "setsid sh -c 'echo $$ > daemon.pid; exec sleep 60' </dev/null >/dev/null 2>&1 &"
    done = await run_process([SH, "-c", daemon + " sleep 0.3"], tmp_path, child_env(), 10)
    assert done.exit_code == 0
    pid = int((tmp_path / "daemon.pid").read_text())
    assert gone(pid), f"daemonised child {pid} outlived its run"


async def test_a_command_ends_when_it_exits_though_its_background_child_holds_its_output(
    tmp_path: Path,
) -> None:
    """asyncio's own wait() waits for the pipes as well: the command came back only when its
    `sleep 30 &` did (or at its timeout), then counted as timed out."""
    done = await run_process([SH, "-c", "sleep 30 & echo $!"], tmp_path, child_env(), 5)
    assert not done.timed_out and done.exit_code == 0
    wait_for(lambda: not alive(int(done.stdout.head)), 5, what="the background child to end")


async def test_a_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    started = time.monotonic()
    done = await run_process(
        [SH, "-c", "sleep 60 & echo $! > child.pid; sleep 60"], tmp_path, child_env(), 0.5
    )
    assert done.timed_out and done.exit_code < 0
    assert time.monotonic() - started < 5
    assert gone(int((tmp_path / "child.pid").read_text()))


async def test_a_cancelled_run_leaves_nothing_running(tmp_path: Path) -> None:
    run = asyncio.create_task(
        run_process([SH, "-c", "echo $$ > leader.pid; sleep 60"], tmp_path, child_env(), 60)
    )
    pid = await wait_for_file(tmp_path / "leader.pid")
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert gone(pid)


async def test_a_child_and_what_it_starts_go_before_the_server_when_memory_runs_out(
    tmp_path: Path,
) -> None:
    """The kernel's OOM killer picks the child first: its score is raised, the server's not."""
    done = await run_process(
        [SH, "-c", "cat /proc/self/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'"],
        tmp_path,
        child_env(),
        10,
    )
    assert done.stdout.head.split() == [b"500", b"500"], done
    assert Path("/proc/self/oom_score_adj").read_text().strip() == "0"


async def test_a_missing_program_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        await run_process(["/nonexistent/program"], tmp_path, child_env(), 10)


def test_child_env_withholds_the_servers_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "SESSION_API_KEY": "k",
        "AGENT_SERVER_WEBHOOK_SECRET": "s",
        "CONTROL_PLANE_TOKEN": "t",
        "PWD": "/srv",
        "GIT_DIR": "/srv/.git",
        "USER_SETTING": "kept",
    }.items():
        monkeypatch.setenv(name, value)
    env = child_env({"GIT_AUTHOR_NAME": "Ada"}, {"USER_SETTING": "layered"})
    assert (
        not {
            "SESSION_API_KEY",
            "AGENT_SERVER_WEBHOOK_SECRET",
            "CONTROL_PLANE_TOKEN",
            "PWD",
            "GIT_DIR",
        }
        & env.keys()
    )
    assert env["USER_SETTING"] == "layered" and env["GIT_AUTHOR_NAME"] == "Ada"
    assert env["PAGER"] == "cat" and env["GIT_TERMINAL_PROMPT"] == "0"
    assert "GIT_TERMINAL_PROMPT" not in child_env(quiet=False)


async def test_a_child_sees_only_that_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SESSION_API_KEY", "server-key")
    monkeypatch.setenv("CONTROL_PLANE_API_KEY", "plane-key")
    done = await run_process(["env"], tmp_path, child_env(), 10)
    assert b"server-key" not in done.stdout.head and b"plane-key" not in done.stdout.head


def test_the_proc_scanner_finds_a_process_and_its_group() -> None:
    marker = f"--core-test-marker-{os.getpid()}"
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", marker], start_new_session=True
    )
    try:
        # Popen returns once the child is forked, before it has exec'd python with the marker.
        assert wait_for(lambda: find_process(marker), what="the child's exec") == child.pid
        assert group_members(child.pid) == [child.pid]
        [info] = [p for p in list_processes() if p.pid == child.pid]
        assert (info.pgid, info.session, info.ppid) == (child.pid, child.pid, os.getpid())
    finally:
        child.kill()
        child.wait()
    assert find_process(marker) is None and group_members(child.pid) == []


def test_a_stat_file_read_as_its_process_ends_is_skipped_not_an_error() -> None:
    from core.processes import parse_stat

    assert parse_stat(7, b"") is None
    assert parse_stat(7, b"7 (sh) S 1") is None
    info = parse_stat(7, b"7 (a (weird) name) S 1 7 7 0 -1")
    assert info is not None and (info.state, info.ppid, info.pgid, info.session) == ("S", 1, 7, 7)


def test_a_process_is_named_by_pid_and_start_time_and_found_by_an_environment_entry() -> None:
    """What a launcher keeps of a child it must find again after a restart (the control plane's
    process sandboxes): the pid and its start time, and an entry of its environment."""
    from core.processes import is_running, signal_group, start_time, state, with_environment

    entry = f"CORE_TEST_ENTRY=here-{os.getpid()}".encode()
    child = subprocess.Popen(
        [SH, "-c", "exec sleep 30"],
        start_new_session=True,
        env={"CORE_TEST_ENTRY": f"here-{os.getpid()}", "PATH": "/usr/bin:/bin"},
    )
    try:
        started = start_time(child.pid)
        assert started is not None and is_running(child.pid, started)
        assert not is_running(child.pid, started + 1)  # another process that had this pid
        deadline = time.monotonic() + 10
        while with_environment(entry) != [child.pid]:  # the environment is the exec'd one's
            assert time.monotonic() < deadline, "the child's environment never showed"
            time.sleep(0.01)
        assert with_environment(entry[:-1]) == []  # a whole entry, not a prefix of one
        assert signal_group(child.pid, signal.SIGSTOP)
        while state(child.pid) != "T":  # a signal lands asynchronously
            assert time.monotonic() < deadline, "the child never stopped"
            time.sleep(0.01)
        signal_group(child.pid, signal.SIGKILL)
        child.wait()
        assert not is_running(child.pid, started) and state(child.pid) is None
        assert not signal_group(child.pid, signal.SIGKILL)  # gone: False, not an error
    finally:
        child.kill()
        child.wait()
