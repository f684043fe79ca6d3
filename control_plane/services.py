"""Services: every long-lived object of the control plane, built once from the Config.

This is what the lifespan yields; routes receive it typed (`api.io.services`), never through
an untyped bag.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from control_plane import llm
from control_plane.accounts import Accounts
from control_plane.agent_client import AgentClient
from control_plane.app_conversations import AppConversationService
from control_plane.audit import AuditLog
from control_plane.config import Config
from control_plane.crypto import Cipher
from control_plane.deltas import DeltaHub
from control_plane.gateway import Gateway
from control_plane.intake import Intake
from control_plane.leases import Leases
from control_plane.lifecycle import Lifecycle
from control_plane.network import host
from control_plane.network.boundary import Boundary
from control_plane.network.fence import Fence
from control_plane.network.links import Links
from control_plane.network.policy import NetworkPolicy
from control_plane.network.rules import Segment
from control_plane.providers.disks import Disks
from control_plane.providers.docker.network import DockerNetwork
from control_plane.providers.parking import Parking
from control_plane.providers.pool import Pooled, WarmPool
from control_plane.providers.process import cgroups, gvisor
from control_plane.providers.process.isolation import Isolation, IsolationUnavailable, choose
from control_plane.providers.process.provider import SPEC, ProcessProvider
from control_plane.providers.process.settings import ProcessSettings
from control_plane.providers.process.template import Template
from control_plane.relay import Bell
from control_plane.runs import Runs
from control_plane.sandboxes.drift import Drift
from control_plane.sandboxes.egress import SandboxEgress
from control_plane.sandboxes.fences import NodeFences
from control_plane.sandboxes.measured import Measured
from control_plane.sandboxes.provider import Limits, SandboxProvider
from control_plane.sandboxes.rows import SandboxRows
from control_plane.sandboxes.service import SandboxService
from control_plane.settings import SettingsService
from control_plane.start_tasks import StartTaskService
from control_plane.store import Database
from control_plane.telemetry import Telemetry
from control_plane.telemetry.metrics import Figures
from control_plane.transcripts import Transcripts
from control_plane.webhook import WebhookReceiver
from core.net import is_loopback
from core.retry import Clock

if TYPE_CHECKING:  # (the Docker SDK is loaded with a container provider only)
    from control_plane.providers.swarm.fence import SwarmFence


logger = logging.getLogger(__name__)


def _boundary_unavailable(config: Config, who: str) -> bool:
    """Whether this control plane cannot fence its sandboxes' network (said in one line);
    IsolationUnavailable when `isolated` requires it."""
    if config.sandbox_network == "host":
        logger.warning(
            "%s share this host's network (CONTROL_PLANE_SANDBOX_NETWORK=host): no "
            "egress policy holds them",
            who,
        )
        return True
    missing = host.missing_tools()
    why = (
        "the control plane does not run as root"
        if os.geteuid() != 0
        else f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed"
        if missing
        else None
    )
    if why is None:
        return False
    if config.sandbox_network == "isolated":
        raise IsolationUnavailable(f"CONTROL_PLANE_SANDBOX_NETWORK=isolated, but {why}")
    logger.warning("%s are not held to an egress policy (%s)", who, why)
    return True


def _policies(db: Database) -> Callable[[str], Awaitable[NetworkPolicy | None]]:
    rows = SandboxRows(db)

    async def policy_of(sandbox_id: str) -> NetworkPolicy | None:
        row = await rows.get(sandbox_id)
        return None if row is None or row.status.terminal else row.network

    return policy_of


def network_boundary(config: Config, db: Database) -> Boundary | None:
    """Process sandboxes' network boundary, where this control plane can make one (root,
    `ip`, `nft` and `nsenter`); None: they share this host's network."""
    if _boundary_unavailable(config, "process sandboxes"):
        return None
    links = Links(
        config.sandbox_subnet,
        loopback=(config.port, config.sandbox_port) if is_loopback(config.host) else None,
    )
    segment = Segment(
        tag=f"{int(config.sandbox_subnet.network_address):08x}",
        subnet=config.sandbox_subnet,
        gateway=links.gateway,
        interfaces=links.interfaces,
        port=config.sandbox_port,
        masquerade=True,
    )
    logger.info(
        "process sandboxes each have a network namespace on %s (this control plane is %s there)",
        config.sandbox_subnet,
        links.gateway,
    )
    return Boundary(
        Fence(segment), links, policy_of=_policies(db), upstream=config.sandbox_dns_upstream
    )


def docker_boundary(config: Config, db: Database) -> DockerNetwork | None:
    """The Docker provider's network boundary (its bridge network's, made once Docker has
    made the network), where this control plane can make one on the daemon's host."""
    if _boundary_unavailable(config, "Docker sandboxes"):
        return None
    if not config.docker_url.startswith("unix://"):
        logger.warning(
            "Docker sandboxes are not held to an egress policy: the daemon at %s is "
            "another host's, whose firewall this control plane does not set",
            config.docker_url,
        )
        return None

    def boundary_for(segment: Segment) -> Boundary:
        logger.info(
            "Docker sandboxes are held to their egress policies on %s (this control "
            "plane is %s there)",
            segment.subnet,
            segment.gateway,
        )
        return Boundary(
            Fence(segment, docker_user=False),
            None,
            policy_of=_policies(db),
            upstream=config.sandbox_dns_upstream,
        )

    return DockerNetwork(boundary_for, config.sandbox_port)


def swarm_fence(config: Config, fences: NodeFences) -> SwarmFence:
    """The Swarm nodes' fences as `config` has them (the provider's, and `control-plane
    node-fence`'s for an operator's node)."""
    from control_plane.providers.containers import plane_label
    from control_plane.providers.swarm.fence import SwarmFence

    return SwarmFence(
        fences,
        image=config.sandbox_image,
        plane=plane_label(config.db_url),
        control_plane_url=config.base_url,
        network=config.swarm_network,
        constraints=config.swarm_constraints,
        node_socket=config.swarm_node_docker_socket,
        upstream=config.sandbox_dns_upstream,
        runtime=config.sandbox_runtime,
    )


def build_provider(
    config: Config, db: Database, fences: NodeFences | None = None
) -> SandboxProvider:
    """The provider `sandbox_provider` names (the Docker SDK is loaded only when one of its two
    is chosen), behind a warm pool when the deployment asks for one (a process kind's where
    its servers are forked from the template)."""
    if config.sandbox_provider in ("docker", "swarm"):
        if config.sandbox_provider == "swarm":
            from control_plane.providers.swarm.provider import SwarmProvider
            from control_plane.providers.swarm.settings import SwarmSettings

            fence = None if fences is None else swarm_fence(config, fences)
            swarm = SwarmSettings.of(config)
            return pooled(SwarmProvider(swarm, fence=fence), swarm.warm_pool, swarm.webhook_url)
        from control_plane.providers.docker.provider import DockerProvider
        from control_plane.providers.docker.settings import DockerSettings

        settings = DockerSettings.of(config)
        provider = DockerProvider(settings, fence=docker_boundary(config, db))
        return pooled(provider, settings.warm_pool, settings.webhook_url)
    isolation: Isolation | None
    if config.sandbox_isolation == "gvisor":
        isolation = gvisor.choose(
            hidden=[config.state_dir],
            uids=config.sandbox_uids,
            platform=config.sandbox_gvisor_platform,
            limits=Limits.of(config),
        )
    else:
        isolation = choose(
            config.sandbox_isolation,
            hidden=[config.state_dir],
            uids=config.sandbox_uids,
            limits=Limits.of(config),
        )
    template = (
        Template(config.state_dir / "template")
        if config.sandbox_template
        and isolation is not None
        and not isolation.own_kernel
        and isolation.uids
        else None
    )
    groups = cgroups.find()
    if isinstance(groups, str):
        logger.warning("process sandboxes run without memory, process or CPU limits: %s", groups)
    process_kind = ProcessProvider(
        ProcessSettings.of(config),
        isolation=isolation,
        template=template,
        groups=None if isinstance(groups, str) else groups,
        network=network_boundary(config, db) if isolation else None,
        disks=disks(config, isolation),
    )
    # Parked servers are the template's forks: without it, nothing is parked.
    return (
        process_kind
        if template is None
        else pooled(process_kind, config.warm_pool, config.webhook_base)
    )


def pooled(provider: Parking[Any], size: int, webhook_url: str | None) -> SandboxProvider:
    """`provider` behind a warm pool of `size` (`providers.pool`), when there is to be one and
    the webhook URL every sandbox of this control plane gets is known (a parked server is given
    it before it knows its sandbox); otherwise `provider` alone."""
    return Pooled(provider, size, webhook_url) if size > 0 and webhook_url else provider


def disks(config: Config, isolation: Isolation | None) -> Disks | None:
    """A filesystem of its own per isolated sandbox, where this process may mount one."""
    if isolation is None or not config.sandbox_disk_limit:
        return None
    if os.geteuid() != 0:
        logger.warning("process sandboxes share this host's disk: a disk limit needs root")
        return None
    return Disks(config.state_dir / "disks", int(config.sandbox_disk_limit))


@dataclass(frozen=True)
class Services:
    config: Config
    db: Database
    accounts: Accounts
    cipher: Cipher
    provider: SandboxProvider
    sandboxes: SandboxService
    agents: AgentClient
    settings: SettingsService
    tasks: StartTaskService
    conversations: AppConversationService
    webhook: WebhookReceiver
    lifecycle: Lifecycle
    """The reconciler: timers and drift, one loop."""
    leases: Leases
    """This process's hold on start tasks and sandboxes (several control planes, one database)."""
    bell: Bell
    """Rung by the webhook for the live relays (`control_plane.relay`)."""
    deltas: DeltaHub
    """The sockets to agent servers that bring the relays streaming text."""
    transcripts: Transcripts
    """The stored events of conversations: searches, counts, the live relays."""
    intake: Intake
    """The webhook batches in flight, bounded per sandbox and in bytes."""
    gateway: Gateway
    """The LLM gateway: sandboxes' model calls, with the user's key put in here."""
    egress: SandboxEgress
    """Sandboxes' network policies: changed at run time, and what they refused."""
    fences: NodeFences | None
    """A swarm's node fences (their reports, the policies they are given); None otherwise."""
    audit: AuditLog
    """The audit log: who did what, when and from where (`control_plane.audit`)."""
    telemetry: Telemetry
    """Metrics and spans (`control_plane.telemetry`)."""
    warm_pool: WarmPool | None
    """The provider's warm pool, when it has one (its figures are scraped)."""
    openapi: dict[str, Any] = field(default_factory=dict)
    """The OpenAPI document, built on its first request (empty until then)."""

    @classmethod
    def build(
        cls,
        config: Config,
        provider: SandboxProvider | None = None,
        clock: Clock | None = None,
        bell: Bell | None = None,
    ) -> Services:
        """`clock`: the time of stored records and timers (default: the system's)."""
        db = Database(config.db_url, clock or Clock())
        cipher = Cipher.for_config(config.secret_key, config.state_dir)
        # A swarm's nodes fence its sandboxes, and report to this control plane.
        fences = (
            NodeFences(db, cipher)
            if config.sandbox_provider == "swarm" and config.sandbox_network != "host"
            else None
        )
        telemetry = Telemetry.build(
            config.tracing_enabled,
            config.otlp_traces_endpoint,
            config.traces_sampler,
            config.traces_sampler_arg,
        )
        built = provider or build_provider(config, db, fences)
        warm_pool = built.pool if isinstance(built, Pooled) else None
        provider = Measured(built, telemetry, config.sandbox_provider)
        bell = bell or Bell()
        leases = Leases(db, config.lease_seconds)
        agents = AgentClient(timeout=config.agent_timeout)
        sandboxes = SandboxService(
            db,
            provider,
            cipher,
            leases,
            sandboxes_dir=config.sandboxes_dir,
            webhook_url=config.webhook_base,
            runs=Runs(db, agents, pause_grace=config.pause_grace),
            ring=bell.ring,
            max_per_user=config.max_sandboxes_per_user,
            max_live=config.max_sandboxes,
            memory_floor=int(config.sandbox_memory_floor),
            # A start (or a pause waiting for runs) may hold a sandbox this long.
            guard_timeout=config.sandbox_start_timeout + config.pause_grace + 30,
            hibernation=config.sandbox_hibernation,
        )
        settings = SettingsService(db, cipher)
        tasks = StartTaskService(
            db,
            cipher,
            sandboxes,
            settings,
            agents,
            leases,
            cap=config.max_conversations_per_sandbox,
            repository_url_template=config.repository_url_template,
            spec_id=provider.specs()[0].id if provider.specs() else SPEC.id,
            telemetry=telemetry,
        )
        records = AppConversationService(db, sandboxes, agents)
        audit = AuditLog(db)
        drift = Drift(sandboxes, health_grace=config.health_grace)
        lifecycle = Lifecycle(
            db,
            sandboxes,
            drift,
            tasks,
            leases,
            idle_seconds=config.idle_seconds,
            deletion_seconds=config.deletion_seconds,
            interval=config.reconcile_interval,
            audit=audit,
        )
        deltas = DeltaHub(db, sandboxes)
        gateway = Gateway(
            db,
            cipher,
            settings,
            config,
            lambda: sandboxes.control_plane_url,
            host_loopback=provider.host_loopback,
            metrics=telemetry.metrics,
        )
        return cls(
            config=config,
            db=db,
            accounts=Accounts(db),
            cipher=cipher,
            provider=provider,
            sandboxes=sandboxes,
            agents=agents,
            settings=settings,
            tasks=tasks,
            conversations=records,
            webhook=WebhookReceiver(
                db,
                cipher,
                bell,
                sandboxes.working_dir,
                cap=config.webhook_conversations_per_sandbox,
                metrics=telemetry.metrics,
            ),
            lifecycle=lifecycle,
            leases=leases,
            bell=bell,
            deltas=deltas,
            transcripts=Transcripts(db, bell, deltas),
            intake=Intake(config.webhook_batches_per_sandbox, int(config.webhook_bytes_in_flight)),
            gateway=gateway,
            egress=SandboxEgress(sandboxes),
            fences=fences,
            audit=audit,
            telemetry=telemetry,
            warm_pool=warm_pool,
        )

    async def start(self) -> None:
        """Migrations, then adoption of the sandboxes still there, then unfinished start tasks
        nobody works on; then the lease renewal and the reconciler."""
        self.config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.config.state_dir.chmod(0o700)  # its key and database are for this process alone
        await self.db.migrate()
        await self.provider.start()
        self.leases.start()
        await self.lifecycle.adopt()
        await self.tasks.take_over()
        self.lifecycle.start()
        llm.preload()

    async def close(self, stop_sandboxes: bool = False) -> None:
        """Every part is closed, the database last, even when one before it fails (the log
        says which): a provider that cannot close leaves no connection open."""
        self.bell.close()
        steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("deltas", self.deltas.close),
            ("lifecycle", self.lifecycle.close),
            ("start tasks", self.tasks.close),
            ("llm gateway", self.gateway.close),
            ("sandboxes", lambda: self.sandboxes.close(stop_sandboxes=stop_sandboxes)),
            ("leases", self.leases.close),
            ("agent client", self.agents.close),
            ("database", self.db.close),
            ("telemetry", self._flush_spans),
        ]
        for name, close in steps:
            try:
                await close()
            except Exception:
                logger.exception("closing the %s failed", name)

    async def _flush_spans(self) -> None:
        """Spans still batched are sent (a blocking export, off the loop)."""
        await asyncio.to_thread(self.telemetry.shutdown)

    async def figures(self) -> Figures:
        """What a metrics scrape reads first: the database's counts (sandboxes by status, on
        Swarm by node too; the start tasks waiting), the database pool, the warm pool."""
        swarm = self.config.sandbox_provider == "swarm"
        by_status: Counter[tuple[str, str]] = Counter()
        for (status, node), count in (await self.sandboxes.rows.by_status()).items():
            by_status[status, self.telemetry.metrics.node(node) if swarm and node else ""] += count
        pool = self.warm_pool
        return Figures(
            provider=self.config.sandbox_provider,
            sandboxes=by_status,
            start_tasks=await self.tasks.queue(),
            db_pool=self.db.pool_figures(),
            warm_pool=None if pool is None else (len(pool.waiting), pool.hits, pool.misses),
        )
