"""What the configuration tells the process kind: one frozen object, built once from `Config`.

The composition root hands it over whole (`ProcessSettings.of(config)`) instead of mapping the
configuration field by field into a long list of keyword arguments. What the provider is given
besides are the parts of this host it found (its isolation, the template, the cgroups, the
network boundary, the disks): made by probing the machine, not read from the configuration,
they stay arguments of the provider.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from control_plane.config import Config
from control_plane.sandboxes.provider import DEFAULT_LIMITS, Limits


@dataclass(frozen=True)
class ProcessSettings:
    """The process provider's settings; the defaults are the configuration's own."""

    archive_dir: Path
    """Where a destroyed sandbox's workspace is archived (`<sandbox id>.tar.gz`), out of every
    route's reach."""
    shared_host: bool = False
    """Without isolation, sandboxes run as this process's user and could read each other's
    files and this control plane's state: they serve one user only, unless this accepts it."""
    start_timeout: float = 60.0
    """Seconds a start may take: the sandbox made, its server ready and answering."""
    stop_grace: float = 5.0
    """Seconds a destroy waits for the server to end on SIGTERM before everything left of the
    sandbox is killed."""
    limits: Limits = DEFAULT_LIMITS
    """What one sandbox may use, held by its cgroups where there are some."""
    traces_url: str | None = None
    """Where every sandbox's agent server sends its spans (OTLP/HTTP; None: nowhere)."""
    sandboxes_dir: Path | None = None
    """Where sandboxes' directories are (`SandboxProvider.root_dir`): a parked one's is made
    there before its row is (None: none is parked)."""
    parked_dir: Path | None = None
    """Where each parked sandbox is marked until it is claimed: a control plane that starts
    removes what earlier ones parked."""

    @classmethod
    def of(cls, config: Config) -> ProcessSettings:
        """The settings `config` gives (its limits as `Limits.of` reads them for every kind)."""
        return cls(
            archive_dir=config.state_dir / "archives",
            shared_host=config.shared_host,
            start_timeout=config.sandbox_start_timeout,
            stop_grace=config.sandbox_stop_grace,
            limits=Limits.of(config),
            traces_url=config.sandbox_otlp_traces_endpoint,
            sandboxes_dir=config.sandboxes_dir,
            parked_dir=config.state_dir / "parked",
        )
