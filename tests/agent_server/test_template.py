"""The sandbox template's warm-up (`agent_server.template.warm_up`): its model calls are all
answered by its canned model, and it leaves nothing a forked server could trip on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, os, threading
from agent_server import template
from agent_server.agent import litellm_setup, transport
litellm_setup.load_now()
before = dict(os.environ)
answered = template.warm_up()
print(json.dumps({
    "answered": answered,
    "threads": threading.active_count(),
    "clients": len(transport._clients),
    "environment_kept": dict(os.environ) == before,
}))
"""


def test_the_warm_up_is_answered_and_leaves_no_thread_client_or_variable() -> None:
    """Every call answered (both models, both shapes of answer); after it no thread (the
    template forks), no HTTP client a server's loop could find, the environment as it was."""
    out = subprocess.run(
        [sys.executable, "-P", "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
        env={"PATH": "/usr/bin:/bin", "NOT_FOR_THE_WARM_UP": "x"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "warm-up skipped" not in out.stderr, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {
        "answered": 4,
        "threads": 1,
        "clients": 0,
        "environment_kept": True,
    }
