"""Calls on a Swarm manager for one sandbox's service: changing its spec (again on a newer
version when another writer came first), its log, the network sandboxes go on, and what a
claimed warm service needs to start cold. `spec` builds and reads the JSON these send and
get; the provider (`provider`) strings them into a lifecycle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import docker
import docker.errors

from control_plane.providers.swarm.nodejobs import api
from control_plane.providers.swarm.spec import CLAIMED, WARM_SERVER, entrypoint
from control_plane.sandboxes.provider import ProviderError


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
