"""What is left of a destroyed process sandbox on this host's disk: its workspace archived,
then the rest removed.

The workspace goes into `<archive_dir>/<sandbox id>.tar.gz` (0600, written beside and then
renamed, so an archive is whole or absent), where no route serves it. Then everything else of
the sandbox goes: its own filesystem (`disks`), its directory, what its isolation keeps
outside it (gVisor's bundle) and its cgroups. Blocking: the provider runs it off the loop.
"""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path

from control_plane.providers.disks import DiskError, Disks
from control_plane.providers.process import cgroups
from control_plane.providers.process.isolation import Isolation
from control_plane.sandboxes.provider import ProviderError


class Archiver:
    """Archives sandboxes' workspaces into `archive_dir` and removes their remains."""

    def __init__(
        self,
        archive_dir: Path,
        *,
        isolation: Isolation | None,
        groups: cgroups.Cgroups | None,
        disks: Disks | None,
    ) -> None:
        self.archive_dir = archive_dir
        self.isolation = isolation
        self.groups = groups
        self.disks = disks

    def archive_and_remove(self, sandbox_id: str, root_dir: Path) -> Path | None:
        """The archive's path (None: the sandbox had no workspace); its files are gone."""
        archive: Path | None = None
        if self.disks is not None:  # a hibernated sandbox's, unmounted
            try:
                self.disks.mount(sandbox_id, root_dir)
            except DiskError as exc:
                raise ProviderError(f"the sandbox's disk could not be mounted: {exc}") from None
        workspace = root_dir / "workspace"
        if workspace.is_dir():
            self.archive_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            archive = self.archive_dir / f"{sandbox_id}.tar.gz"
            partial = archive.with_suffix(".partial")
            with tarfile.open(partial, "w:gz") as tar:
                tar.add(workspace, arcname=sandbox_id)
            os.chmod(partial, 0o600)
            os.replace(partial, archive)
        self.remove(sandbox_id, root_dir)
        return archive

    def remove(self, sandbox_id: str, root_dir: Path) -> None:
        """Everything of the sandbox on this host gone, nothing archived (a parked one's: no
        one ever had it)."""
        if self.disks is not None:
            try:
                self.disks.detach(sandbox_id, root_dir)
            except DiskError as exc:
                raise ProviderError(f"the sandbox's disk could not be removed: {exc}") from None
        shutil.rmtree(root_dir, ignore_errors=True)
        if self.isolation is not None:
            self.isolation.remove(root_dir)
        if self.groups is not None:
            self.groups.remove(sandbox_id)
