"""`make demo` as a newcomer runs it, and stops it: with Ctrl+C, or with a SIGTERM (a `kill`, a
service manager, a closed terminal), its sandboxes stop with it as docs/console.md says."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import httpx
import pytest

from core import processes
from tests.control_plane.planes import PlaneProcess, sandbox_pids
from tests.control_plane.support import start
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_the_demo_stops_with_its_sandboxes(tmp_path: Path, stop: signal.Signals) -> None:
    demo = PlaneProcess(tmp_path / "demo", module="tests.support.demo")
    try:
        demo.start()
        key = wait_for(
            lambda: re.search(
                r"Sign in with this key \(user demo\): (\S+)", demo.log_file.read_text()
            ),
            30,
            what="the demo's key",
        )[1]
        with httpx.Client(
            base_url=demo.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as client:
            tasks = [start(client, "Print a greeting", run=False) for _ in range(2)]
        assert [t["status"] for t in tasks] == ["READY", "READY"], tasks
        launchers = sandbox_pids(demo.state_dir)
        assert len(launchers) == 2
        started = {pid: processes.start_time(pid) for pid in launchers.values()}
        assert None not in started.values()

        assert demo.proc is not None
        demo.proc.send_signal(stop)
        assert demo.proc.wait(60) == 0
        left = [
            pid for pid, at in started.items() if at is not None and processes.is_running(pid, at)
        ]
        assert left == [], f"sandboxes left running: {left}"
    finally:
        demo.stop()
