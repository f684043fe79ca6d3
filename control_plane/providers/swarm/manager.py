"""Calls on a Swarm manager for one sandbox's service: finding it and its tasks and nodes,
making it with its keys' secret, changing its spec (again on a newer version when another
writer came first), its log, the network sandboxes go on, what a claimed warm service needs to
start cold, and removing it with its secrets.

Each takes the SDK's client first, as `ContainerProvider.run` calls it in a worker thread (the
SDK blocks). `spec` builds and reads the JSON these send and get, without a call; the provider
(`provider`) and its warm pool (`pool`) string these into a lifecycle.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

import docker
import docker.errors

from control_plane.providers.containers import name_of
from control_plane.providers.swarm.nodejobs import Node, api, host_port
from control_plane.providers.swarm.settings import SwarmSettings
from control_plane.providers.swarm.spec import (
    CLAIMED,
    WARM_SERVER,
    entrypoint,
    newest,
    node_of,
    pinned,
    task_template,
)
from control_plane.sandboxes.provider import Launch, ProviderError

logger = logging.getLogger(__name__)


def matching(labels: dict[str, str]) -> dict[str, list[str]]:
    """The Engine API's filter for a sandbox's objects, which carry all of `labels` (never
    found by name alone: another deployment may have used it)."""
    return {"label": [f"{k}={v}" for k, v in labels.items()]}


# -- finding a sandbox's service, its tasks and its node --------------------------------------


def find(
    client: docker.DockerClient, sandbox_id: str, labels: dict[str, str]
) -> dict[str, Any] | None:
    """The sandbox's service, or None (its jobs carry the same labels, not its name)."""
    name = name_of(sandbox_id)
    for service in api(client).services(filters=matching(labels)):
        if service["Spec"]["Name"] == name:
            found: dict[str, Any] = service
            return found
    return None


def tasks(client: docker.DockerClient, service_id: str) -> list[dict[str, Any]]:
    """Every task of the service the manager still knows, ended ones too."""
    found: list[dict[str, Any]] = api(client).tasks(filters={"service": service_id})
    return found


def node(client: docker.DockerClient, node_id: str) -> tuple[Node, dict[str, Any]] | None:
    """The node and its status; None once it has left the cluster."""
    try:
        attrs: dict[str, Any] = api(client).inspect_node(node_id)
    except docker.errors.NotFound:
        return None
    return node_of(attrs), attrs


def current(
    client: docker.DockerClient, service_id: str, earlier: frozenset[str]
) -> tuple[dict[str, Any] | None, Node | None]:
    """The service's current task, none of `earlier` (the ids of tasks that ended before: a
    paused sandbox's), and the node it was placed on (None: not placed yet, or gone)."""
    task = newest([t for t in tasks(client, service_id) if t["ID"] not in earlier])
    if task is None or not task.get("NodeID"):
        return task, None
    found = node(client, str(task["NodeID"]))
    return task, None if found is None else found[0]


def volume_node(client: docker.DockerClient, service: dict[str, Any]) -> str | None:
    """Where the sandbox's volume is: the node it is pinned to, else its task's."""
    node_id = pinned(service["Spec"])
    if node_id is None:
        placed = [t for t in tasks(client, service["ID"]) if t.get("NodeID")]
        task = newest(placed)
        node_id = None if task is None else str(task["NodeID"])
    return node_id


def reachable_node(client: docker.DockerClient, service: dict[str, Any]) -> Node | None:
    """The node of the volume, None when there is none (never placed, or the node left the
    cluster); ProviderError while it is down (the clean-up is tried again)."""
    node_id = volume_node(client, service)
    if node_id is None:
        return None
    found = node(client, node_id)
    if found is None:
        logger.warning(
            "sandbox %s: its node %s left the cluster: its workspace is not archived",
            service["Spec"]["Labels"].get("agent-server.sandbox"),
            node_id[:12],
        )
        return None
    reached, attrs = found
    if attrs["Status"]["State"] != "ready":
        raise ProviderError(
            f"its node {reached.hostname} is {attrs['Status']['State']}: its "
            "workspace is archived and its volume removed once it is back"
        )
    return reached


# -- making and changing it ---------------------------------------------------------------------


def start_service(
    client: docker.DockerClient,
    settings: SwarmSettings,
    launch: Launch,
    labels: dict[str, str],
    *,
    secret: bytes | None = None,
    server: str = "agent-server",
    marks: Mapping[str, str] | None = None,
) -> str:
    """The sandbox's service as `settings` have it (its id), its keys in its secret; a parked
    one's (`pool`): `secret` its claim token, `server` its command, `marks` labels of the
    service alone. Any secret an earlier start left goes first; none is left when the
    manager refuses the service."""
    name = name_of(launch.sandbox_id)
    check_network(client, settings.network)
    remove_secrets(client, labels)
    made = api(client).create_secret(f"{name}-keys", secret or launch.keys(), labels=labels)
    template = task_template(settings, launch, made["ID"], labels, server=server)
    try:
        service = api(client).create_service(
            template,
            name=name,
            labels={**labels, **(marks or {})},
            mode=docker.types.ServiceMode("replicated", 1),
            endpoint_spec=host_port(None),
        )
    except BaseException:
        remove_secrets(client, labels)
        raise
    return str(service["ID"])


def unparked(
    client: docker.DockerClient, service: dict[str, Any]
) -> Callable[[dict[str, Any]], None]:
    """For a service claimed from a warm pool: a change giving it a cold start's task (the
    server's own command, its keys' secret, made at the claim), to apply while its task stops
    (a pause), so that its next one starts as any sandbox's does. Others: no change."""
    spec = service["Spec"]
    if WARM_SERVER not in " ".join(spec["TaskTemplate"]["ContainerSpec"]["Command"]):
        return lambda _: None
    name = spec["Name"] + CLAIMED
    found = [s for s in api(client).secrets(filters={"name": name}) if s["Spec"]["Name"] == name]
    if not found:
        raise ProviderError("the keys of this claimed sandbox are missing: it cannot resume")

    def change(spec: dict[str, Any]) -> None:
        container = spec["TaskTemplate"]["ContainerSpec"]
        container["Command"] = ["tini", "--", "sh", "-c", entrypoint()]
        for reference in container.get("Secrets") or []:
            reference["SecretID"], reference["SecretName"] = found[0]["ID"], name

    return change


def update(
    client: docker.DockerClient,
    service_id: str,
    change: Callable[[dict[str, Any]], None],
    attempts: int = 5,
) -> None:
    """Apply `change` to the service's spec; again on a newer version when another writer
    came first (the manager refuses an update of an old version)."""
    for attempt in range(attempts):
        current = api(client).inspect_service(service_id)
        spec: dict[str, Any] = current["Spec"]
        before = repr(spec)
        change(spec)
        if repr(spec) == before:
            return
        try:
            api(client).update_service(
                service_id,
                current["Version"]["Index"],
                task_template=spec["TaskTemplate"],
                name=spec["Name"],
                labels=spec.get("Labels"),
                mode=spec["Mode"],
                endpoint_spec=spec.get("EndpointSpec"),
            )
            return
        except docker.errors.APIError as exc:
            if "out of sequence" not in str(exc) or attempt == attempts - 1:
                raise


def service_logs(client: docker.DockerClient, service_id: str) -> str:
    try:
        raw = b"".join(api(client).service_logs(service_id, stdout=True, stderr=True, tail="40"))
    except docker.errors.DockerException:
        return "(no log)"
    return raw[-2000:].decode(errors="replace").strip() or "(no log)"


def check_network(client: docker.DockerClient, network: str) -> None:
    """`bridge` (the default) is each node's own default bridge, on which its daemon keeps
    sandboxes apart (`"icc": false`, README); the manager cannot see the nodes' daemons, so
    that is the operator's. Any other network must be a swarm-scoped bridge made from a
    config-only network with inter-container traffic off; refused (with the commands that make
    it) otherwise. (Docker 20.10 rejects tasks on such a network on a node that rebooted,
    "network ... exists", until its network state is cleared: hence the default.)"""
    if network == "bridge":
        return
    how = (
        f"make it once: `docker network create --config-only -o "
        f"com.docker.network.bridge.enable_icc=false {network}-config` on every node, "
        f"then `docker network create -d bridge --scope swarm --config-from "
        f"{network}-config {network}` on a manager (or set "
        "CONTROL_PLANE_SWARM_NETWORK)"
    )
    try:
        found = client.networks.get(network).attrs
    except docker.errors.NotFound:
        raise ProviderError(f"the swarm network {network!r} is missing: {how}") from None
    config = (found.get("ConfigFrom") or {}).get("Network")
    if found.get("Driver") != "bridge" or found.get("Scope") != "swarm" or not config:
        raise ProviderError(
            f"the network {network!r} is not a swarm-scoped bridge made "
            f"from a config-only network, so sandboxes could reach each other: {how}"
        )
    try:
        options = client.networks.get(config).attrs.get("Options") or {}
    except docker.errors.NotFound:
        return  # the manager runs no sandboxes: each node's own config says
    if options.get("com.docker.network.bridge.enable_icc") != "false":
        raise ProviderError(
            f"the config network {config!r} lets containers reach each other: {how}"
        )


# -- removing it ----------------------------------------------------------------------------------


def remove_objects(client: docker.DockerClient, labels: dict[str, str]) -> None:
    """The sandbox's service, its jobs and its secrets (a secret once no service uses it)."""
    for service in api(client).services(filters=matching(labels)):
        with contextlib.suppress(docker.errors.NotFound):
            api(client).remove_service(service["ID"])
    remove_secrets(client, labels)


def remove_secrets(client: docker.DockerClient, labels: dict[str, str]) -> None:
    for secret in api(client).secrets(filters=matching(labels)):
        with contextlib.suppress(docker.errors.NotFound):
            api(client).remove_secret(secret["ID"])
