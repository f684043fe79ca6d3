"""What a Docker sandbox's container is made of: one place says how every sandbox is confined.

A sandbox's container:
- is named `agent-sandbox-<sandbox id>` and labelled with the sandbox's id and the control
  plane's deployment (a digest of its database URL: every control plane of one deployment
  shares it), which is how a restarted control plane finds it again;
- keeps its agent-server state and its workspace in a named volume of its own (same name),
  mounted at `/workspace`: the workspace is `/workspace/project` (where OpenHands clients
  expect it), the agent server's state `/workspace/.agent-server` beside it; a container
  removed by hand loses nothing the next start needs; with a disk limit the volume binds
  filesystems of the sandbox's own (`docker.disks`);
- publishes the agent server's port 8000 on 127.0.0.1 only, on a host port Docker chooses;
- gets the webhook URL in its environment, and nothing of the control plane's own (no
  CONTROL_PLANE_* variable, no host environment at all); its session key comes on its stdin
  (attached once, then closed: `agent_server.secrecy`), so no process of the container reads
  it from tini's environment; its server says it serves on a twin of its stdout (READY_FD),
  which that attach reads (`docker.attach`);
- is on the sandboxes' bridge network (`docker.bridge`), its resolver the boundary's gateway
  when there is a boundary (`docker.network`);
- runs as the image's unprivileged user (uid 1000, whatever the image says) with every
  capability dropped, no-new-privileges, a read-only root file system (writes go to the volume
  and to tmpfs /tmp and home), and limits on memory, CPU and processes; no host path and no
  Docker socket is mounted;
- has the image's HEALTHCHECK off (the control plane asks /alive itself);
- runs the daemon's default OCI runtime, or the one the settings name (runsc: gVisor).

A warm pool's container is the same but for its server's module: it loads everything first
and waits for its keys (`docker.pool`).

Created with the Engine API's own call (the SDK's model would inspect it again at once: one
round trip more for every start); its volume is the provider's to make first (`docker.disks`).
"""

from __future__ import annotations

from typing import Any

import docker

from control_plane.providers.containers import (
    HOME,
    PORT_NUMBER,
    UID,
    USER,
    VOLUME_DIR,
    environment,
    name_of,
)
from control_plane.providers.docker.bridge import HOST_ALIAS
from control_plane.providers.docker.settings import DockerSettings
from control_plane.sandboxes.provider import Limits

PORT = f"{PORT_NUMBER}/tcp"
"""The agent server's port inside the container, as the Engine API names it."""
#: The image's HEALTHCHECK is for `docker run` by hand: here the control plane asks /alive
#: itself, and Docker's check would start a Python in every sandbox every 10 s (65 ms of CPU
#: each: a third of a core for 50 idle sandboxes, taken from the ones starting).
NO_HEALTHCHECK = {"test": ["NONE"]}
READY_FD = 3
"""The descriptor the server says it serves on (`launch.ready`): a twin of its stdout, made by
the shell that execs it, so the word comes out on the attach the provider holds; the server
closes it once it has spoken. Its stdout proper stays where it was."""
#: tini, then a shell that makes READY_FD and execs the server (the shell is gone before the
#: server starts: signals, exit status and the process tree are the server's own).
_SERVING = ["tini", "--", "sh", "-c", f'exec "$@" {READY_FD}>&1', "sh"]
#: A cold start's server: the image's entrypoint's command.
ENTRYPOINT = [*_SERVING, "agent-server", "--host", "0.0.0.0", "--port", str(PORT_NUMBER)]
#: A warm pool's parked server (its host and port are the image's variables, as for the
#: image's own entrypoint).
WARM_ENTRYPOINT = [*_SERVING, "python", "-m", "agent_server.warm"]


def tmpfs(limits: Limits) -> dict[str, str]:
    """Writable places of the read-only root (the state volume aside), bounded in size by the
    sandbox's memory, which their pages are (`Limits.tmp`)."""
    return {
        "/tmp": f"rw,nosuid,nodev,size={limits.tmp},mode=1777",
        HOME: f"rw,nosuid,nodev,size={limits.home},uid={UID},gid={UID},mode=0700",
    }


def create(
    client: docker.DockerClient,
    settings: DockerSettings,
    *,
    sandbox_id: str,
    name: str,
    labels: dict[str, str],
    webhook_url: str,
    gateway: str | None,
    warm: bool = False,
) -> str:
    """A sandbox's container named `name`, created (not started) on its volume, which is made
    already; its id. `gateway`: the boundary's address on the bridge, where the control plane
    and the resolver are (None: no boundary, the host is the bridge's own gateway).
    `warm`: a warm pool's (`pool.py`)."""
    limits = settings.limits
    api = client.api
    host_config = api.create_host_config(
        # On 127.0.0.1 only, a host port Docker picks.
        port_bindings={PORT: ("127.0.0.1", None)},
        binds={name_of(sandbox_id): {"bind": VOLUME_DIR, "mode": "rw"}},
        network_mode=settings.network,
        extra_hosts={HOST_ALIAS: gateway or "host-gateway"},
        dns=None if gateway is None else [gateway],
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        read_only=True,
        tmpfs=tmpfs(limits),
        shm_size=limits.shm,
        mem_limit=limits.memory,
        nano_cpus=int(limits.cpus * 1e9),
        pids_limit=limits.pids,
        runtime=settings.runtime,
    )
    networks: Any = {settings.network: None}  # as the SDK's model names the network
    made = api.create_container(
        settings.image,
        name=name,
        labels=labels,
        environment=environment(
            webhook_url, keys_fd=0, traces_url=settings.traces_url, ready_fd=READY_FD
        ),
        # Not detached, stdin open: Docker closes the stdin once the one attach that hands
        # over the keys ends its writing (StdinOnce).
        detach=False,
        stdin_open=True,
        entrypoint=WARM_ENTRYPOINT if warm else ENTRYPOINT,
        ports=[(str(PORT_NUMBER), "tcp")],
        volumes=[VOLUME_DIR],
        user=USER,
        healthcheck=NO_HEALTHCHECK,
        host_config=host_config,
        networking_config=networks,
    )
    return str(made["Id"])
