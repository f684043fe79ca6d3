"""The small blocking calls on the Docker engine that the provider's steps are made of.

Each takes the client first, so the provider runs it in a worker thread
(`ContainerProvider.run`, which also turns Docker's errors into ProviderErrors) and the event
loop never waits on Docker. They find a container by its id, which the provider got from
creating it or from its labels; a container gone meanwhile is an answer (None, "(no log)"),
not an error, where the caller has something to say about it.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import docker
import docker.errors

from control_plane.providers import containers
from control_plane.providers.containers import LOG_TAIL
from control_plane.providers.docker.container import PORT
from control_plane.providers.docker.network import address_of
from control_plane.sandboxes.provider import Handle, ProviderError


def id_key(container_id: str) -> int:
    """60 bits of the container id: what a handle kept of it before refs (store revision 0008),
    in the old `pid_start_time` column (a signed BIGINT)."""
    return int(container_id[:15], 16)


def refers_to(ref: str, container_id: str) -> bool:
    """Whether a handle's ref names this container (its id, or the old shape by `id_key`)."""
    return containers.refers_to(ref, container_id, id_key)


def attributes(client: docker.DockerClient, container_id: str) -> dict[str, Any] | None:
    """The container's attributes (`docker inspect`), None once it is gone."""
    try:
        found: dict[str, Any] = client.api.inspect_container(container_id)
        return found
    except docker.errors.NotFound:
        return None


def state(client: docker.DockerClient, container_id: str) -> dict[str, Any] | None:
    """The container's state (`docker inspect`'s State), None once it is gone."""
    try:
        found: dict[str, Any] = client.api.inspect_container(container_id)["State"]
        return found
    except docker.errors.NotFound:
        return None


def published(attrs: dict[str, Any]) -> int:
    """The host port of a running container's agent server (`docker inspect`'s attributes)."""
    try:
        return int(attrs["NetworkSettings"]["Ports"][PORT][0]["HostPort"])
    except (KeyError, IndexError, TypeError, ValueError):
        raise ProviderError("the container's port was not published") from None


def handle_of(client: docker.DockerClient, sandbox_id: str, container_id: str) -> Handle:
    """The handle of a running container: its id (the ref) and its published port."""
    port = published(client.api.inspect_container(container_id))
    return Handle(sandbox_id=sandbox_id, ref=container_id, port=port)


def start(
    client: docker.DockerClient, container_id: str, network: str
) -> tuple[int, ipaddress.IPv4Address | None]:
    """The container started, then looked at once: its published port and its address on
    `network` (None when it has none there)."""
    client.api.start(container_id)
    attrs = client.api.inspect_container(container_id)
    return published(attrs), address_of(attrs, network)


def rename(client: docker.DockerClient, container_id: str, name: str) -> None:
    client.api.rename(container_id, name)


def address(
    client: docker.DockerClient, container_id: str, network: str
) -> ipaddress.IPv4Address | None:
    """The container's address on `network`, which the boundary admits it by."""
    return address_of(client.api.inspect_container(container_id), network)


def logs(client: docker.DockerClient, container_id: str) -> str:
    """The end of the container's log, quoted when its agent server exits while starting."""
    try:
        raw: bytes = client.api.logs(container_id, stdout=True, stderr=True, tail=40)
    except docker.errors.NotFound:
        return "(no log)"
    return raw[-LOG_TAIL:].decode(errors="replace").strip() or "(no log)"


def remove_container(client: docker.DockerClient, container_id: str) -> None:
    """The container and its anonymous volumes removed, whatever it was doing (the sandbox's
    named volume stays: its workspace outlives a failed start)."""
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        pass
