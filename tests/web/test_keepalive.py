"""Each service keeps a client's idle connection open past the client's own pool
(`web/keepalive.py`): with both at 5 s, a request sent as the server closed met a reset."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from tests.control_plane.support import make_config

#: How long httpx's pool keeps an idle connection (the OpenHands SDK's and our own clients').
CLIENTS_EXPIRY = httpx.Limits().keepalive_expiry


def test_the_control_plane_outlasts_its_clients_pools(tmp_path: Path) -> None:
    from control_plane.__main__ import server

    idle = server(make_config(tmp_path)).config.timeout_keep_alive
    assert CLIENTS_EXPIRY is not None and idle > CLIENTS_EXPIRY
    # Behind a load balancer that keeps its connections a minute, the operator sets more.
    config = make_config(tmp_path, keep_alive_seconds=65)
    assert server(config).config.timeout_keep_alive == 65


def test_the_agent_server_outlasts_its_clients_pools(tmp_path: Path) -> None:
    built = "import agent_server.__main__ as m; print(m._server([]).config.timeout_keep_alive)"
    out = subprocess.run(  # (its start-up sets up the process's logging and guards)
        [sys.executable, "-c", built],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AGENT_SERVER_PORT": "0"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert CLIENTS_EXPIRY is not None and int(out.stdout) > CLIENTS_EXPIRY
