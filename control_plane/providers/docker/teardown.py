"""A Docker sandbox's end: its container stopped and removed, its workspace archived, its volume
and its own filesystems (`docker.disks`) removed.

Apart from the provider because it is a walk of its own, done in one worker thread, that has to
work from whatever is left: a sandbox whose start was cut short (no handle), a container
removed by hand (its volume alone), one being removed by someone else right now (its volume
in use until Docker is done). The workspace is read through the Engine API before anything
goes, from the sandbox's container or, when that is gone, from a container created (never
started) on its volume: nothing of a sandbox is on this machine's disk, and a deleted sandbox
leaves a tar.gz of its workspace under the archive directory, served by no route.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import docker
import docker.errors
from docker.models.containers import Container

from control_plane.providers.containers import VOLUME_DIR, WORKSPACE, name_of
from control_plane.providers.docker.disks import VolumeDisks, remove_volume
from control_plane.providers.docker.settings import DockerSettings
from control_plane.sandboxes.provider import ProviderError

logger = logging.getLogger(__name__)

#: Seconds a container being removed by someone else is waited for (its volume is in use).
REMOVAL_TIMEOUT = 30.0
#: Writes a sandbox's workspace archive from its tar stream (`ContainerProvider.write_archive`).
Archiver = Callable[[str, Iterable[bytes]], Path]


def tear_down(
    client: docker.DockerClient,
    settings: DockerSettings,
    sandbox_id: str,
    container: Container | None,
    *,
    labels: dict[str, str],
    write: Archiver,
    disks: VolumeDisks | None = None,
) -> Path | None:
    """`container` (the sandbox's, found by its labels, or None) stopped (SIGTERM, SIGKILL
    after the grace period) and removed, the workspace archived from its volume (`write`), the
    volume removed, and its filesystems (`disks`): the archive's path, or None when there was
    no workspace to archive. `labels`: the sandbox's, for a helper container made to read its
    volume."""
    if container is not None and container.status in ("removing", "dead"):
        # Removed behind our back (`docker rm -f` returns before Docker is done): its
        # volume is what is left, and it is in use until the container is really gone.
        if container.status == "dead":
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                container.remove(force=True, v=True)
        wait_gone(client, str(container.id), REMOVAL_TIMEOUT)
        container = None
    if container is not None:
        if container.status == "paused":  # a frozen process acts on no signal
            container.unpause()
        if container.status in ("running", "paused", "restarting"):
            container.stop(timeout=int(settings.stop_grace + 0.999))
    if disks is not None:  # read from its filesystems, not the bare directory under them
        disks.remount(sandbox_id)
    archive = _archive(client, settings, sandbox_id, container, labels=labels, write=write)
    if container is not None:
        container.remove(force=True, v=True)
    remove_volume(client, disks, sandbox_id)
    return archive


def _archive(
    client: docker.DockerClient,
    settings: DockerSettings,
    sandbox_id: str,
    container: Container | None,
    *,
    labels: dict[str, str],
    write: Archiver,
) -> Path | None:
    """The workspace as `<archive dir>/<sandbox id>.tar.gz`, read through the Engine API
    from the sandbox's container, or from a container created (never started) on its
    volume when the sandbox's own is gone."""
    helper: Container | None = None
    try:
        if container is None:
            try:
                client.volumes.get(name_of(sandbox_id))
            except docker.errors.NotFound:
                return None
            helper = container = client.containers.create(
                settings.image,
                labels=labels,
                network_disabled=True,
                volumes={name_of(sandbox_id): {"bind": VOLUME_DIR, "mode": "ro"}},
            )
        try:
            chunks, _ = container.get_archive(WORKSPACE)
        except docker.errors.NotFound:
            return None
        return write(sandbox_id, chunks)
    except docker.errors.ImageNotFound:
        logger.warning(
            "sandbox %s: its workspace is not archived (image %s is gone)",
            sandbox_id,
            settings.image,
        )
        return None
    finally:
        if helper is not None:
            helper.remove(force=True)


def wait_gone(client: docker.DockerClient, container_id: str, timeout: float) -> None:
    """Until Docker has removed the container; ProviderError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            client.api.inspect_container(container_id)
        except docker.errors.NotFound:
            return
        time.sleep(0.05)
    raise ProviderError(f"container {container_id[:12]} is still being removed after {timeout:g} s")
