"""A filesystem of its own for each sandbox: its disk quota, for every kind that can have one.

A sandbox's directory (its workspace, its agent server's state, its home) is otherwise a
directory of the host's disk, and one tenant that fills it fills the disk under every other
sandbox and under the control plane's store. So, where this control plane runs as root, each
sandbox's directory is an ext4 filesystem of its own, made in a sparse image file of the
limit's size (it takes on the host only what is written) and mounted there through a loop
device, `nosuid,nodev`. Writing past the limit fails in that sandbox alone with "No space left
on device"; the host, the store and the other sandboxes keep their room. ext4 keeps no blocks
back for root (`-m 0`): the sandbox has the whole limit.

Its agent server's state (its conversations' events) is a second, smaller filesystem of its
own inside it: a build that fills the workspace must not leave the server unable to record
what happened (a run that filled one shared filesystem never finished). An agent that fills
the state instead (its commands run as the server's user) stops only its own server.

A process sandbox's directory is the mount itself (`process.start`); a Docker sandbox's
volume binds it into the container (`docker.disks`). Both are this one module so that the
kinds cannot drift apart: the layer rules let no kind import another's.

The mount outlives a restart of the control plane (it is the kernel's); after a reboot the
image is mounted again when the sandbox is. A directory already holding files without an
image (made before disks were on) is left as it is rather than hidden under a new mount.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from control_plane.models import DiskUsage

logger = logging.getLogger(__name__)
#: A process sandbox's agent server's state, a directory of its (`environment.child_env`).
STATE = "state"
#: Bytes of the smallest filesystem made (ext4 wants room for its journal).
MIN_SIZE = 16 * 1024**2


class DiskError(Exception):
    """The sandbox's filesystem could not be made, mounted or removed."""


@dataclass(frozen=True)
class Disks:
    """Where the images live (the control plane's state, which no sandbox sees) and the size
    of each."""

    images: Path
    size: int
    """Bytes."""
    state: str = STATE
    """The server's state: the directory of the sandbox's that is a filesystem of its own."""

    def images_of(self, sandbox_id: str, root_dir: Path) -> list[tuple[Path, Path, int]]:
        """(image, mount point, bytes) of the sandbox's filesystems, outermost first."""
        return [
            (self.images / f"{sandbox_id}.ext4", root_dir, self.size),
            (self.images / f"{sandbox_id}.state.ext4", root_dir / self.state, self.state_size),
        ]

    @property
    def state_size(self) -> int:
        """Bytes of the server's state: a quarter of the limit."""
        return max(MIN_SIZE, self.size // 4)

    def attach(self, sandbox_id: str, root_dir: Path) -> None:
        """`root_dir` and its server's state mounted on the sandbox's images, made when it has
        none. Blocking."""
        root_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not self.images_of(sandbox_id, root_dir)[0][0].exists() and any(root_dir.iterdir()):
            logger.warning(
                "sandbox %s keeps its directory on the host's disk (it holds files "
                "and has no image): no disk limit holds it",
                sandbox_id,
            )
            return
        filesystems = self.images_of(sandbox_id, root_dir)
        _make([(image, size) for image, _, size in filesystems if not image.exists()])
        self.mount(sandbox_id, root_dir)

    def mount(self, sandbox_id: str, root_dir: Path) -> None:
        """The sandbox's images that exist mounted where they belong (those mounted already
        left as they are). Blocking."""
        for image, mount_point, _ in self.images_of(sandbox_id, root_dir):
            if not image.exists() or not mount_point.parent.is_dir():
                continue
            mount_point.mkdir(exist_ok=True, mode=0o700)
            if os.path.ismount(mount_point):
                continue
            # noinit_itable: the kernel does not zero the lazily made inode tables behind the
            # sandbox's back (a sparse file reads as zeros already).
            _run(
                [
                    "mount",
                    "-o",
                    "loop,nosuid,nodev,noatime,noinit_itable",
                    str(image),
                    str(mount_point),
                ]
            )
            with contextlib.suppress(OSError):
                (mount_point / "lost+found").rmdir()
            mount_point.chmod(0o700)

    def unmount(self, sandbox_id: str, root_dir: Path) -> None:
        """The sandbox's filesystems unmounted (lazily if something still holds one), their
        images kept: a hibernated sandbox holds no loop device and no mount. Blocking."""
        for _, mount_point, _ in reversed(self.images_of(sandbox_id, root_dir)):
            if os.path.ismount(mount_point):
                try:
                    _run(["umount", str(mount_point)])
                except DiskError:
                    _run(["umount", "-l", str(mount_point)])

    def detach(self, sandbox_id: str, root_dir: Path) -> None:
        """The sandbox's filesystems unmounted and their images removed: what they held is
        gone. Blocking."""
        self.unmount(sandbox_id, root_dir)
        for image, _, _ in self.images_of(sandbox_id, root_dir):
            image.unlink(missing_ok=True)

    def usage(self, root_dir: Path) -> DiskUsage | None:
        """Bytes used and the limit of the sandbox's filesystems together; None where it has
        none."""
        used = limit = 0
        for mount_point in (root_dir, root_dir / self.state):
            if not os.path.ismount(mount_point):
                return None
            stats = os.statvfs(mount_point)
            used += (stats.f_blocks - stats.f_bfree) * stats.f_frsize
            limit += stats.f_blocks * stats.f_frsize
        return DiskUsage(used=used, limit=limit)


def _make(images: list[tuple[Path, int]]) -> None:
    """Each (image, bytes) made, all at once: a sparse file, formatted in place.

    No discard pass (the file is sparse already), inode tables and the journal written lazily,
    a small journal and no room kept for growing the filesystem: making one takes about
    15 ms, not a pass over its size."""
    made: list[tuple[Path, Path, subprocess.Popen[str]]] = []
    try:
        for image, size in images:
            image.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            partial = image.with_suffix(".partial")
            with open(partial, "wb") as sparse:
                sparse.truncate(size)
            journal = ["-J", "size=16"] if size >= 512 * 1024**2 else []
            argv = [
                "mkfs.ext4",
                "-q",
                "-F",
                "-m",
                "0",
                "-O",
                "^resize_inode",
                *journal,
                "-E",
                "nodiscard,lazy_itable_init=1,lazy_journal_init=1",
                str(partial),
            ]
            try:
                process = subprocess.Popen(
                    argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                )
            except OSError as exc:
                partial.unlink(missing_ok=True)
                raise DiskError(f"mkfs.ext4: {exc}") from None
            made.append((image, partial, process))
    finally:
        failures = []
        for image, partial, process in made:
            try:
                said, _ = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                said, _ = process.communicate()
            if process.returncode == 0:
                os.replace(partial, image)
            else:
                partial.unlink(missing_ok=True)
                failures.append(f"mkfs.ext4 failed: {said.strip()[:300]}")
    if failures:
        raise DiskError(failures[0])


def _run(argv: list[str]) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DiskError(f"{argv[0]}: {exc}") from None
    if done.returncode != 0:
        raise DiskError(f"{argv[0]} failed: {(done.stderr or done.stdout).strip()[:300]}")
