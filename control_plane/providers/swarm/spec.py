"""A Swarm sandbox's service as the manager's Engine API takes it, and what the provider reads
back from its JSON (tasks, nodes, the pin of a paused service): pure, no call on a manager
(those are `manager`'s), so the provider reads as its lifecycle and these as the shapes it
sends and parses.

The sandbox's task:
- gets its session key in a Docker secret of its own (encrypted in the managers' Raft log, never
  in the service's spec), mounted for root only (0400). Its entrypoint starts as root under
  tini, opens the secret on a descriptor and execs the agent server through `setpriv` as the
  image's user (uid 1000) with no capabilities, an empty bounding set and no_new_privs, the
  descriptor its launch environment names (`launch.env`): the agent server reads it and closes
  it (`launch.keys`), and nothing it starts can open the file, gain root through a setuid
  program, or read the key from an environment (`agent_server.secrecy`). tini stays as root with
  nothing of the key;
- runs with a read-only root, tmpfs /tmp and home, every capability dropped but the five the
  entrypoint's root step uses, the memory, CPU and process limits of the settings, and the
  reservations and placement constraints of the settings (a sandbox no node can take ends its
  start with the scheduler's reason after `placement_timeout`);
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import docker
import docker.types

from control_plane.providers.containers import (
    HOME,
    PORT_NUMBER,
    STATE_DIR,
    UID,
    VOLUME_DIR,
    WORKSPACE,
    environment,
    name_of,
)
from control_plane.providers.containers import refers_to as refers_to_object
from control_plane.providers.swarm.nodejobs import NO_CHECK, Node, host_port
from control_plane.providers.swarm.settings import SwarmSettings
from control_plane.sandboxes.provider import Launch, SandboxSpec

SPEC = SandboxSpec(
    id="swarm",
    description="a one-replica service of the sandbox image on a "
    "Docker Swarm cluster, as an unprivileged user with a read-only root and limits, "
    "its state and workspace in a volume of the node it runs on; its workspace at "
    f"{WORKSPACE}",
    working_dir=WORKSPACE,
)

KEYS_FILE = "agent-server-keys"
"""The secret's file under /run/secrets."""
KEYS_FD = 3
#: The entrypoint's root step (and tini, which signals the agent server): what they need,
#: none of which the agent server has (setpriv drops them all).
ROOT_CAPS = ["CAP_CHOWN", "CAP_KILL", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"]


def entrypoint(server: str = "agent-server") -> str:
    """The task's shell command, `server` the agent server's command (a warm pool's:
    `python -m agent_server.warm --claim ...`)."""
    return (
        f"chown {UID}:{UID} {HOME}"
        f" && exec {KEYS_FD}</run/secrets/{KEYS_FILE}"
        f" && exec setpriv --reuid={UID} --regid={UID} --clear-groups --inh-caps=-all"
        " --bounding-set=-all --no-new-privs --"
        f" {server} --host 0.0.0.0 --port {PORT_NUMBER} --state-dir {STATE_DIR}"
    )


#: Node states in which nothing runs there.
NODE_AWAY = {"down", "unknown", "disconnected"}
#: Task states before the scheduler has placed it.
UNPLACED = {"new", "allocated", "pending"}
#: How the scheduler and a node say a host-mode port is taken.
PORT_TAKEN = ("port already in use", "address already in use")


def service_key(service_id: str) -> int:
    """60 bits of a hash of the service's id: what a handle kept of it before refs (store
    revision 0008), in the old `pid_start_time` column (a signed BIGINT)."""
    return int(hashlib.sha256(service_id.encode()).hexdigest()[:15], 16)


def refers_to(ref: str, service_id: str) -> bool:
    """Whether a handle's ref names this service (its id, or the old shape by `service_key`)."""
    return refers_to_object(ref, service_id, service_key)


def node_of(attrs: dict[str, Any]) -> Node:
    """A node's id, hostname and the address its published ports answer on."""
    address = str((attrs.get("Status") or {}).get("Addr") or "")
    if address in ("", "0.0.0.0"):  # a manager may report its address only here
        address = str((attrs.get("ManagerStatus") or {}).get("Addr", "")).rpartition(":")[0]
    return Node(
        id=str(attrs["ID"]), hostname=str(attrs["Description"]["Hostname"]), address=address
    )


def newest(tasks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The service's current task: the newest meant to run, else the newest."""

    def created(task: dict[str, Any]) -> tuple[str, str]:
        main, _, fraction = str(task.get("CreatedAt", "")).rstrip("Z").partition(".")
        return main, fraction.ljust(9, "0")

    running = [t for t in tasks if t.get("DesiredState") == "running"]
    return max(running or tasks, key=created, default=None)


def pinned(spec: dict[str, Any]) -> str | None:
    """The node a paused service is pinned to."""
    for constraint in (spec["TaskTemplate"].get("Placement") or {}).get("Constraints") or []:
        field, _, value = str(constraint).replace(" ", "").partition("==")
        if field == "node.id":
            return value
    return None


def replicas(spec: dict[str, Any]) -> int:
    return int(spec["Mode"]["Replicated"]["Replicas"])


def published(task: dict[str, Any]) -> int | None:
    for port in (task.get("Status") or {}).get("PortStatus", {}).get("Ports") or []:
        if port.get("TargetPort") == PORT_NUMBER and port.get("PublishedPort"):
            return int(port["PublishedPort"])
    return None


def task_template(
    settings: SwarmSettings,
    launch: Launch,
    secret_id: str,
    labels: dict[str, str],
    server: str = "agent-server",
) -> docker.types.TaskTemplate:
    """The sandbox's task as `settings` have it: never restarted (its volume is on one node),
    the key in its secret, `server` the agent server's command (`entrypoint`)."""
    name = name_of(launch.sandbox_id)
    limits = settings.limits
    container = docker.types.ContainerSpec(
        settings.image,
        command=["tini", "--", "sh", "-c", entrypoint(server)],
        user="0:0",
        env=[
            f"{k}={v}"
            for k, v in environment(launch.webhook_url, KEYS_FD, settings.traces_url).items()
        ],
        labels=labels,
        mounts=[
            docker.types.Mount(VOLUME_DIR, name, type="volume", labels=labels),
            docker.types.Mount(
                "/tmp", None, type="tmpfs", tmpfs_size=limits.tmp, tmpfs_mode=0o1777
            ),
            docker.types.Mount(HOME, None, type="tmpfs", tmpfs_size=limits.home, tmpfs_mode=0o700),
        ],
        secrets=[
            docker.types.SecretReference(
                secret_id, f"{name}-keys", filename=KEYS_FILE, uid="0", gid="0", mode=0o400
            )
        ],
        read_only=True,
        cap_drop=["ALL"],
        cap_add=ROOT_CAPS,
        healthcheck=NO_CHECK,
        stop_grace_period=int(settings.stop_grace * 1e9),
    )
    resources = docker.types.Resources(
        cpu_limit=int(limits.cpus * 1e9),
        mem_limit=limits.memory,
        cpu_reservation=int(settings.cpu_reservation * 1e9) or None,
        mem_reservation=settings.memory_reservation or None,
    )
    resources["Limits"]["Pids"] = limits.pids
    return docker.types.TaskTemplate(
        container,
        resources=resources,
        restart_policy=docker.types.RestartPolicy("none"),
        placement=docker.types.Placement(constraints=list(settings.constraints)),
        networks=[settings.network],
    )


#: A warm pool's parked server, and the secret its keys are kept in once it is claimed.
WARM_SERVER = "python -m agent_server.warm --claim"
CLAIMED = "-keys-claimed"


def pin(spec: dict[str, Any], node_id: str) -> None:
    placement = spec["TaskTemplate"].setdefault("Placement", {})
    constraints = [
        c
        for c in placement.get("Constraints") or []
        if not c.replace(" ", "").startswith("node.id==")
    ]
    placement["Constraints"] = [*constraints, f"node.id=={node_id}"]


def scale(count: int) -> Callable[[dict[str, Any]], None]:
    def change(spec: dict[str, Any]) -> None:
        spec["Mode"] = {"Replicated": {"Replicas": count}}

    return change


def restart(spec: dict[str, Any]) -> None:
    """One replica again. Under the restart policy `none` the slot counts as done and no task
    would be made for it: a forced update makes one."""
    spec["Mode"] = {"Replicated": {"Replicas": 1}}
    spec["TaskTemplate"]["ForceUpdate"] = int(spec["TaskTemplate"].get("ForceUpdate") or 0) + 1


def publish(port: int | None) -> Callable[[dict[str, Any]], None]:
    def change(spec: dict[str, Any]) -> None:
        spec["EndpointSpec"] = host_port(port)

    return change
