"""The Docker provider's settings: what of the configuration a Docker provider is built from.

One frozen object instead of a constructor's keyword list mapped field by field: the
composition root reads it from the `Config` (`DockerSettings.of`), a test names only the few
fields it cares about, and the provider keeps it whole (`DockerProvider.settings`), so what a
provider was built with is one value to read. The network boundary and a test's HTTP transport
are not settings but collaborators: they are handed to the provider beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from control_plane.config import Config
from control_plane.providers.containers import plane_label
from control_plane.sandboxes.provider import DEFAULT_LIMITS, Limits


@dataclass(frozen=True)
class DockerSettings:
    """A Docker provider's settings; the defaults are the configuration's."""

    archive_dir: Path
    """Where a deleted sandbox's workspace is left as `<sandbox id>.tar.gz`."""
    image: str
    """The sandbox image (`make image` builds it from sandbox.Dockerfile)."""
    plane: str
    """The deployment's label value (`containers.plane_label`): control planes on one database
    adopt each other's containers, and leave every other deployment's alone."""
    docker_url: str = "unix:///var/run/docker.sock"
    """The Docker Engine API's address (unix://, tcp:// or ssh://)."""
    network: str = "agent-sandboxes"
    """The sandboxes' bridge network, made when missing, with inter-container traffic off."""
    limits: Limits = DEFAULT_LIMITS
    """What one sandbox's container may use."""
    start_timeout: float = 60.0
    """Seconds an agent server may take to answer /alive."""
    stop_grace: float = 5.0
    """Seconds between SIGTERM and SIGKILL when a sandbox is destroyed."""
    warm_pool: int = 0
    """Containers kept started for new sandboxes (`docker.pool`); none without `webhook_url`,
    which every parked server is given before it knows its sandbox."""
    webhook_url: str | None = None
    """The webhook URL every sandbox of this control plane gets, as this host sees it."""
    traces_url: str | None = None
    """Where every sandbox's agent server sends its spans (OTLP/HTTP; None: nowhere)."""
    runtime: str | None = None
    """The daemon's OCI runtime for the sandboxes' containers (runsc: gVisor), or its default."""
    disk_limit: int = 0
    """Bytes of each sandbox's own filesystem (`docker.disks`); 0: its volume is a directory
    of Docker's disk."""
    disks_dir: Path | None = None
    """Where the sandboxes' filesystem images and their mounts are (the control plane's state)."""

    @classmethod
    def of(cls, config: Config) -> DockerSettings:
        """The settings `config` gives a Docker provider."""
        return cls(
            archive_dir=config.state_dir / "archives",
            image=config.sandbox_image,
            plane=plane_label(config.db_url),
            docker_url=config.docker_url,
            network=config.docker_network,
            limits=Limits.of(config),
            start_timeout=config.sandbox_start_timeout,
            stop_grace=config.sandbox_stop_grace,
            warm_pool=config.warm_pool,
            webhook_url=config.webhook_base,
            traces_url=config.sandbox_otlp_traces_endpoint,
            runtime=config.sandbox_runtime,
            disk_limit=int(config.sandbox_disk_limit),
            disks_dir=config.state_dir / "disks",
        )
