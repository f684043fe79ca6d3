"""A Docker sandbox's disk limit: its volume binds a filesystem of its own.

A plain volume is a directory of the Docker host's disk, so one tenant that fills it fills the
disk under every other sandbox and the control plane's store. Where this control plane runs as
root beside its daemon (a unix socket: the same host and the same filesystem), each sandbox's
volume is instead a local-driver volume that binds (`rbind`) a directory of the control plane's
state on which the sandbox's own filesystems are mounted, made and measured exactly as a
process sandbox's (`providers.disks`): an ext4 image of the limit, its server's state
(`/workspace/.agent-server`) a second one of a quarter inside it. Past the limit a write in the
container fails with "No space left on device", in that sandbox alone.

Why a bind of the control plane's mount and not a volume of the loop device itself (`type=ext4,
device=/dev/loopN`): a loop device's number is the kernel's, handed to whichever image is
attached next once it is free. After a reboot a volume naming `/dev/loopN` would mount another
sandbox's disk. A bind names a path of this sandbox's own; the mount under it is made again
(`remount`) before anything of the sandbox's starts, and at worst an unmounted directory is
bound (no limit), never another tenant's data.

The mounts outlive a restart of the control plane (they are the kernel's), so adopted containers
keep theirs; a sandbox's images are removed with its volume. A volume made before the limit was
on (a directory of Docker's) is kept as it is, without a limit, and said so.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

from control_plane.models import DiskUsage
from control_plane.providers.containers import STATE_DIR, UID, VOLUME_DIR, WORKSPACE, name_of
from control_plane.providers.disks import DiskError, Disks
from control_plane.sandboxes.provider import ProviderError

logger = logging.getLogger(__name__)

#: The server's state and the project, as directories of the volume's root.
STATE = os.path.relpath(STATE_DIR, VOLUME_DIR)
PROJECT = os.path.relpath(WORKSPACE, VOLUME_DIR)


@dataclass(frozen=True)
class VolumeDisks:
    """Each sandbox's filesystems: images under `images`, mounted at `mounts/<sandbox id>`
    (both in the control plane's state, which no sandbox sees)."""

    disks: Disks
    mounts: Path

    @classmethod
    def at(cls, directory: Path, size: int) -> VolumeDisks:
        """Images of `size` bytes in `directory`, mounted under `directory/mounts`."""
        return cls(Disks(directory, size, state=STATE), directory / "mounts")

    def root_of(self, sandbox_id: str) -> Path:
        return self.mounts / sandbox_id

    def options(self, sandbox_id: str) -> dict[str, str]:
        """The local driver's options of the sandbox's volume: a recursive bind of its mount
        (its state's filesystem comes along)."""
        return {"type": "none", "device": str(self.root_of(sandbox_id)), "o": "rbind"}

    def attach(self, sandbox_id: str) -> None:
        """The sandbox's filesystems made when it has none, and mounted. A new one is laid out
        as the image's `/workspace` is (the volume is not empty, so Docker copies nothing in):
        the root, the state and the project the sandbox user's. Blocking."""
        root = self.root_of(sandbox_id)
        fresh = not self.disks.images_of(sandbox_id, root)[0][0].exists()
        self.disks.attach(sandbox_id, root)
        if fresh and os.path.ismount(root):
            project = root / PROJECT
            project.mkdir(mode=0o755)
            for path in (root, root / STATE, project):
                os.chown(path, UID, UID, follow_symlinks=False)

    def remount(self, sandbox_id: str) -> None:
        """Its filesystems mounted again where they exist and are not (after a reboot), so
        its volume never binds the bare directory under them; ProviderError when they cannot
        be. Blocking."""
        if self.disks.images_of(sandbox_id, self.root_of(sandbox_id))[0][0].exists():
            try:
                self.disks.attach(sandbox_id, self.root_of(sandbox_id))
            except DiskError as exc:
                raise ProviderError(f"the sandbox's disk could not be mounted: {exc}") from None

    def detach(self, sandbox_id: str) -> None:
        """Its filesystems unmounted, their images and the mount point removed. Blocking."""
        root = self.root_of(sandbox_id)
        self.disks.detach(sandbox_id, root)
        with contextlib.suppress(OSError):
            root.rmdir()

    def usage(self, sandbox_id: str) -> DiskUsage | None:
        return self.disks.usage(self.root_of(sandbox_id))


def ensure_volume(
    client: docker.DockerClient,
    disks: VolumeDisks | None,
    sandbox_id: str,
    labels: dict[str, str],
) -> None:
    """The sandbox's volume, made when missing: on its own filesystems where there are disks,
    mounted first (`remount` of an existing one). ProviderError when they cannot be made."""
    name = name_of(sandbox_id)
    if disks is None:
        client.volumes.create(name=name, labels=labels)
        return
    existing: Any = None
    with contextlib.suppress(docker.errors.NotFound):
        existing = client.volumes.get(name)
    if existing is not None and (existing.attrs.get("Options") or {}) != disks.options(sandbox_id):
        logger.warning(
            "sandbox %s keeps its volume on Docker's disk (made without a disk limit): "
            "no disk limit holds it",
            sandbox_id,
        )
        return
    try:
        disks.attach(sandbox_id)
    except DiskError as exc:
        raise ProviderError(f"the sandbox's disk could not be made: {exc}") from None
    if existing is None:
        client.volumes.create(
            name=name, labels=labels, driver="local", driver_opts=disks.options(sandbox_id)
        )


def remove_volume(client: docker.DockerClient, disks: VolumeDisks | None, sandbox_id: str) -> None:
    """The sandbox's volume removed, then its filesystems (what they held is gone)."""
    with contextlib.suppress(docker.errors.NotFound):
        client.volumes.get(name_of(sandbox_id)).remove(force=True)
    if disks is not None:
        try:
            disks.detach(sandbox_id)
        except DiskError as exc:
            raise ProviderError(f"the sandbox's disk could not be removed: {exc}") from None


def volume_disks(directory: Path | None, size: int, docker_url: str) -> VolumeDisks | None:
    """The sandboxes' disks, where this control plane can give them: a limit set, root, and
    the daemon on this host (a unix socket), whose mounts it binds; otherwise None, said."""
    if directory is None or not size:
        return None
    if os.geteuid() != 0 or not docker_url.startswith("unix://"):
        logger.warning(
            "Docker sandboxes share the Docker host's disk: a disk limit needs a control "
            "plane that runs as root on the daemon's host (a unix:// socket)"
        )
        return None
    return VolumeDisks.at(directory, size)
