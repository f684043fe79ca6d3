"""What the stop and pause tests share: processes an agent sent out of its server's session
(found by a mark in their command line), a control plane per isolation, and a process
sandbox made through the provider alone, with its bash API."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from control_plane.providers.process import cgroups
from control_plane.providers.process.isolation import Isolation
from control_plane.providers.process.provider import ProcessProvider
from control_plane.providers.process.settings import ProcessSettings
from control_plane.sandboxes.provider import Handle, Launch
from core import processes
from tests.control_plane.support import ControlPlane, make_config


def left(mark: str) -> list[processes.ProcessInfo]:
    """The live processes whose command line holds `mark`."""
    found = []
    for p in processes.list_processes():
        try:
            if p.alive and mark.encode() in Path(f"/proc/{p.pid}/cmdline").read_bytes():
                found.append(p)
        except OSError:
            continue  # ended meanwhile
    return found


def clean_up(mark: str, sandbox_id: str) -> None:
    """What a failed test left: the marked processes, and all of the sandbox's cgroup."""
    for found in left(mark):
        os.kill(found.pid, 9)
    mount = cgroups.v2_root()
    if mount is not None and (leaf := mount / cgroups.GROUP / sandbox_id).is_dir():
        (leaf / "cgroup.kill").write_text("1")


def as_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("cgroups are written by root only: run as root")


@contextmanager
def plane_for(isolation: str, hibernation: str, tmp_path: Path) -> Iterator[ControlPlane]:
    """A control plane whose process sandboxes run with `isolation` (off, auto) and
    `hibernation` (off, idle, always), on a shared host (one user or many)."""
    as_root()
    plane = ControlPlane(
        make_config(
            tmp_path / "cp",
            sandbox_isolation=isolation,
            shared_host=True,
            sandbox_hibernation=hibernation,
        )
    ).start()
    try:
        yield plane
    finally:
        plane.stop()


def bare(
    tmp_path: Path, groups: cgroups.Cgroups | None, isolation: Isolation | None = None
) -> tuple[ProcessProvider, Launch]:
    """The provider alone (a one-second grace), and a launch of a sandbox for it."""
    provider = ProcessProvider(
        ProcessSettings(tmp_path / "archives", shared_host=True, stop_grace=1.0),
        isolation=isolation,
        groups=groups,
    )
    launch = Launch(
        sandbox_id=uuid.uuid4().hex,
        spec_id="process",
        root_dir=tmp_path / "sandboxes" / uuid.uuid4().hex[:8],
        session_api_key=uuid.uuid4().hex,
        webhook_url="http://127.0.0.1:9/",
    )
    launch.root_dir.parent.mkdir()
    return provider, launch


def bash(handle: Handle, launch: Launch) -> httpx.AsyncClient:
    """The sandbox server's host-scoped bash API."""
    return httpx.AsyncClient(
        base_url=f"http://{handle.host}:{handle.port}/api/bash",
        headers={"X-Session-API-Key": launch.session_api_key},
        timeout=60,
    )
