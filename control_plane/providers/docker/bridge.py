"""The sandboxes' bridge network, and how a container on it reaches this host.

Every sandbox's container is on one bridge network of the provider's own with inter-container
traffic off: sandboxes cannot reach each other's agent servers, nor the host's loopback
services (a database, the published ports). A network of that name that lets containers talk
to each other (made by someone else) is refused rather than used.

The control plane is reached as `host.docker.internal`, which each container maps to the
host's bridge gateway (`host-gateway`); a webhook URL on a loopback or wildcard address is
rewritten to that name, so the control plane must listen where the bridge reaches it (0.0.0.0
or the docker0 address; `Config` refuses a loopback-only listener without a public URL).
Behind the network boundary (`docker.network`) the gateway is the boundary's, and the control
plane is there at the boundary's port.

Kept apart from `docker.network`, which the composition root imports whatever the provider:
this module speaks to Docker (its SDK is loaded with a container provider only).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import docker
import docker.errors

from control_plane.sandboxes.provider import ProviderError

HOST_ALIAS = "host.docker.internal"
"""This host as a sandbox's container names it: the bridge's gateway."""
ICC = "com.docker.network.bridge.enable_icc"
"""The bridge driver's option for inter-container traffic (off for the sandboxes)."""
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0", "::", ""}


def for_container(url: str) -> str:
    """`url` as a container sees it: a loopback or wildcard host is the Docker host, reached
    through the bridge gateway under HOST_ALIAS."""
    parts = urlsplit(url)
    if (parts.hostname or "") not in _LOCAL_HOSTS:
        return url
    netloc = HOST_ALIAS + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def behind_boundary(url: str, port: int) -> str:
    """`url` as a fenced container sees it: behind the boundary, this control plane is the
    bridge's gateway (`HOST_ALIAS`) at the boundary's `port`, whatever address it is known by
    elsewhere."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme="http", netloc=f"{HOST_ALIAS}:{port}"))


def ensure_network(client: docker.DockerClient, name: str) -> dict[str, Any]:
    """The sandboxes' bridge network `name` (its attributes), made when missing; one that lets
    containers talk to each other (made by someone else under that name) is refused."""
    try:
        network = client.networks.get(name)
    except docker.errors.NotFound:
        try:
            made = client.networks.create(
                name,
                driver="bridge",
                options={ICC: "false"},
                labels={"agent-server.sandboxes": "true"},
            )
            made.reload()
            return dict(made.attrs)
        except docker.errors.APIError as exc:  # another control plane made it meanwhile
            if exc.status_code != 409:
                raise
            network = client.networks.get(name)
    options = network.attrs.get("Options") or {}
    if network.attrs.get("Driver") != "bridge" or options.get(ICC) != "false":
        raise ProviderError(
            f"the Docker network {name!r} lets containers reach each "
            f"other (it needs the bridge driver with {ICC}=false): remove it "
            "or set CONTROL_PLANE_DOCKER_NETWORK to another name"
        )
    return dict(network.attrs)
