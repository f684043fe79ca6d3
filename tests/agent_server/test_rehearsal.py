"""The rehearsals (`agent_server.rehearsal`): the warm-up's model calls are all answered by its
canned model, the first conversation is created, and neither leaves anything a server (forked
from the template, or the one that rehearsed) could trip on or a tenant could find."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, os, tempfile, threading
from agent_server import rehearsal
from agent_server.agent import litellm_setup, transport
litellm_setup.load_now()
before = dict(os.environ)
answered = rehearsal.warm_up()
created = rehearsal.first_conversation()
print(json.dumps({
    "answered": answered,
    "created": created,
    "threads": threading.active_count(),
    "clients": len(transport._clients),
    "environment_kept": dict(os.environ) == before,
    "left_in_tmp": sorted(os.listdir(tempfile.gettempdir())),
}))
"""


def test_the_rehearsals_are_answered_and_leave_nothing(tmp_path: Path) -> None:
    """Every call answered (both models, both shapes of answer) and the conversation created;
    after them no thread (the template forks), no HTTP client a server's loop could find, the
    environment as it was, and nothing in the temporary directory (a sandbox's own /tmp, for
    a warm pool's server)."""
    out = subprocess.run(
        [sys.executable, "-P", "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
        env={"PATH": "/usr/bin:/bin", "NOT_FOR_THE_WARM_UP": "x", "TMPDIR": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "skipped" not in out.stderr, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {
        "answered": 4,
        "created": True,
        "threads": 1,
        "clients": 0,
        "environment_kept": True,
        "left_in_tmp": [],
    }
