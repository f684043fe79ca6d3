"""The Swarm provider's settings: what of the configuration a Swarm provider is built from.

One frozen object instead of a constructor's keyword list mapped field by field: the
composition root reads it from the `Config` (`SwarmSettings.of`), a test names only the few
fields it cares about, and the provider keeps it whole (`SwarmProvider.settings`), so what a
provider was built with is one value to read, and the spec of a sandbox's task
(`spec.task_template`) is built from it rather than from a copy of each field. The nodes'
fences and a test's HTTP transport are not settings but collaborators: they are handed to the
provider beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from control_plane.config import Config
from control_plane.providers.containers import plane_label
from control_plane.sandboxes.provider import DEFAULT_LIMITS, Limits

#: Seconds a parked service waits for its control plane's next sign of life (`pool`).
LIFELINE = 60.0


@dataclass(frozen=True)
class SwarmSettings:
    """A Swarm provider's settings; the defaults are the configuration's."""

    archive_dir: Path
    """Where a deleted sandbox's workspace is left as `<sandbox id>.tar.gz`."""
    image: str
    """The sandbox image, which every node that takes sandboxes must be able to pull or have."""
    plane: str
    """The deployment's label value (`containers.plane_label`): control planes on one database
    adopt each other's services, and leave every other deployment's alone."""
    network: str
    """The sandboxes' network: `bridge`, each node's default bridge (its daemon at
    `"icc": false`), or a swarm-scoped bridge made from a config-only network with
    inter-container traffic off (`manager.check_network` says which it accepts)."""
    docker_url: str = "unix:///var/run/docker.sock"
    """A manager's Engine API address (unix://, tcp:// or ssh://)."""
    constraints: tuple[str, ...] = ()
    """Placement constraints of every sandbox's task (`node.labels.sandboxes==true`)."""
    cpu_reservation: float = 0.0
    """CPUs reserved for each sandbox: the scheduler places it only where they are free."""
    memory_reservation: int = 0
    """Bytes of memory reserved for each sandbox."""
    limits: Limits = DEFAULT_LIMITS
    """What one sandbox's task may use."""
    start_timeout: float = 60.0
    """Seconds an agent server may take to answer /alive once its task runs."""
    placement_timeout: float = 30.0
    """Seconds a sandbox's task may wait for a node to take it before its start fails with
    the scheduler's reason."""
    stop_grace: float = 5.0
    """Seconds between SIGTERM and SIGKILL when a sandbox's task is stopped."""
    node_socket: str = "/var/run/docker.sock"
    """The Docker socket's path on every node, bound into the job that removes a deleted
    sandbox's volume there (`nodejobs`)."""
    warm_pool: int = 0
    """Services kept parked for new sandboxes (`pool`); none without `webhook_url`, which
    every parked server is given before it knows its sandbox."""
    webhook_url: str | None = None
    """The webhook URL every sandbox of this control plane gets, as the nodes see it."""
    traces_url: str | None = None
    """Where every sandbox's agent server sends its spans (OTLP/HTTP; None: nowhere)."""
    lifeline: float = LIFELINE
    """Seconds a parked service outlives its pool's last sign of life."""

    @classmethod
    def of(cls, config: Config) -> SwarmSettings:
        """The settings `config` gives a Swarm provider."""
        return cls(
            archive_dir=config.state_dir / "archives",
            image=config.sandbox_image,
            plane=plane_label(config.db_url),
            network=config.swarm_network,
            docker_url=config.docker_url,
            constraints=config.swarm_constraints,
            cpu_reservation=config.swarm_cpu_reservation,
            memory_reservation=int(config.swarm_memory_reservation),
            limits=Limits.of(config),
            start_timeout=config.sandbox_start_timeout,
            placement_timeout=config.swarm_placement_timeout,
            stop_grace=config.sandbox_stop_grace,
            node_socket=config.swarm_node_docker_socket,
            warm_pool=config.warm_pool,
            webhook_url=config.webhook_base,
            traces_url=config.sandbox_otlp_traces_endpoint,
        )
