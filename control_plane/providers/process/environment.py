"""What a process sandbox's agent server is launched with: its environment, and the entry of
it that finds the sandbox's processes again.

A spawned server and one forked from the template get the same environment, made once per
start (`launch.env` names the variables; no control plane module spells them). The ready
file's entry in it marks every process of the sandbox, those its shells start in sessions of
their own too: a destroy sweeps them by it, and a restarted control plane finds a start that
was cut short.
"""

from __future__ import annotations

from pathlib import Path

from control_plane.providers.process.isolation import READY_FILE, Isolation
from control_plane.sandboxes.provider import PROJECT_DIR, Launch
from core import processes
from launch.env import LaunchEnv

#: The agent server's port in a sandbox with a network namespace of its own.
PORT = 8000


def ready_marker(root_dir: Path) -> bytes:
    """The environment entry that marks a sandbox's processes (found again after a restart)."""
    return LaunchEnv(ready_file=str(root_dir / READY_FILE)).entries()[0].encode()


def child_env(
    launch: Launch,
    isolation: Isolation | None = None,
    own_network: bool = False,
    traces_url: str | None = None,
) -> dict[str, str]:
    """The control plane's own settings (its database, its secret key) never reach a sandbox:
    core's child environment withholds them; the sandbox's own go on top. Its keys are not
    among them: they come over the pipe on its stdin. `own_network`: the server listens on
    its namespace's addresses at a fixed port, not on a port of this host's loopback;
    `traces_url`: where it sends its spans."""
    return processes.child_env(
        LaunchEnv(
            keys_fd=0,
            host="0.0.0.0" if own_network else "127.0.0.1",
            port=PORT if own_network else 0,
            state_dir=str(launch.root_dir / "state"),
            working_dir=PROJECT_DIR if isolation else str(launch.workspace),
            ready_file=str(launch.root_dir / READY_FILE),
            webhook_url=launch.webhook_url,
            traces_url=traces_url,
            log_level="warning",
        ).environment(),
        isolation.env(launch.root_dir) if isolation else {},
    )
