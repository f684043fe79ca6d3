"""Config: everything the control plane is told at start: a variable and a flag per field
(`web.config`), read in one place."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ByteSize, ConfigDict, Field, field_validator, model_validator

from core.net import is_loopback
from web import config, keepalive
from web.config import Env
from web.telemetry import TraceSampler, otlp_endpoint

PREFIX = "CONTROL_PLANE_"


class Config(BaseModel):
    """Every setting, with the reason it exists; a flag wins over its `CONTROL_PLANE_*` variable."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    host: str = "127.0.0.1"
    """Listen address."""

    port: int = Field(default=3000, ge=0, le=65535)
    """Listen port."""

    keep_alive_seconds: int = Field(default=keepalive.IDLE_SECONDS, ge=1, le=3600)
    """Seconds an idle client connection is kept open. Longer than the idle timeout of
    whatever connects (httpx's pool: 5 s; a load balancer in front: often 60 s, so 65 behind
    one), or a request it sends as the server closes meets a reset (`web/keepalive.py`)."""

    state_dir: Path = Path("~/.local/state/control-plane")
    """Database (SQLite default), secret key, sandboxes' state and workspaces, archives."""

    database_url: str | None = None
    """SQLAlchemy URL; default `sqlite+aiosqlite:///<state_dir>/control-plane.db`.
    `postgresql+asyncpg://…` (or plain `postgresql://…`) selects PostgreSQL."""

    secret_key: Annotated[str | None, Env("CONTROL_PLANE_SECRET_KEY", flag=False)] = None
    """Fernet key for LLM keys and secrets at rest; default: generated once into the state dir."""

    operator_key: Annotated[str | None, Env("CONTROL_PLANE_OPERATOR_KEY", flag=False)] = None
    """What an operator's routes (`/metrics`, `/api/v1/admin/...`) take as
    `Authorization: Bearer <key>`: not a user's API key, so no user reaches them. Unset, they
    answer 404 (there is no operator to be)."""

    public_url: str | None = None
    """How sandboxes reach this control plane (their webhook base); default http://host:port."""

    log_level: str = "info"

    log_format: Literal["text", "json"] = "text"
    """text: one escaped line per record; json: one object per line (time, level, logger,
    message, trace_id, span_id: a request's lines share its trace's id)."""

    tracing: Literal["auto", "on", "off"] = "auto"
    """auto: spans are recorded and exported when an OTLP endpoint is configured, and given ids
    (nothing recorded) for JSON logs; on: ids even without either; off: never."""

    otlp_traces_endpoint: Annotated[str | None, Env(None)] = Field(
        default=None, pattern=r"^https?://"
    )
    """Where spans go over OTLP/HTTP (protobuf), from the standard OTEL_EXPORTER_OTLP_*
    variables; None: nowhere."""

    traces_sampler: Annotated[TraceSampler, Env("OTEL_TRACES_SAMPLER", flag=False)] = (
        "parentbased_always_on"
    )
    """Which traces are kept (the standard OTEL_TRACES_SAMPLER's built-in names)."""

    traces_sampler_arg: Annotated[float, Env("OTEL_TRACES_SAMPLER_ARG", flag=False)] = Field(
        default=1.0, ge=0, le=1
    )

    sandbox_otlp_traces_endpoint: str | None = Field(default=None, pattern=r"^https?://")
    """Where sandboxes' agent servers send their spans (OTLP/HTTP), so a start's trace goes on
    into the sandbox (its conversation, runs and model calls); it must be reachable from the
    sandboxes (their network policy). None: sandboxes export nothing, though their spans
    still carry the start's trace id."""

    max_conversations_per_sandbox: int = Field(default=20, ge=1, le=10_000)
    """A grouped sandbox is 'available' only below this many conversations (SPEC 1)."""

    max_sandboxes_per_user: int = Field(default=50, ge=1, le=10_000)
    """Live (STARTING, RUNNING, PAUSED) sandboxes one user may have; a start needing one more
    is refused, so a burst of requests cannot fill the machine."""

    max_sandboxes: int = Field(default=100, ge=1, le=100_000)
    """Live sandboxes of all users together (this control plane's database): a start needing
    one more is refused in words, so that users together cannot exhaust the host."""

    sandbox_memory_floor: ByteSize = Field(default=ByteSize(256 * 1024**2), ge=0)
    """A new sandbox is refused while the host has less memory available than this (the
    kernel's MemAvailable; bytes, or with a unit): a clear refusal, not a host swapping."""

    repository_url_template: str = "https://github.com/{repository}.git"
    """`selected_repository` (org/repo) -> clone URL; tests point it at a local bare repository."""

    sandbox_provider: Literal["process", "docker", "swarm"] = "process"
    """What a sandbox is: an agent-server child process on this machine (`process`), a
    container of the sandbox image run through the Docker Engine API (`docker`), or a service
    of that image on a Docker Swarm cluster, through a manager's Engine API (`swarm`)."""

    sandbox_isolation: Literal["auto", "bubblewrap", "gvisor", "off"] = "auto"
    """Process sandboxes in namespaces of their own made by bubblewrap: where it works here
    (`auto`; the log says at start which it is), always (`bubblewrap`: the control plane does
    not start without it), on gVisor (`gvisor`: each on a kernel of its own, runsc's; root
    only, no template; the control plane does not start without it, docs/gvisor.md), or never
    (`off`: they run as this control plane's user and can read its state and each other's
    files)."""

    sandbox_gvisor_platform: Literal["ptrace", "kvm"] = "ptrace"
    """How gVisor's kernel intercepts a process sandbox's system calls: `ptrace` works
    everywhere; `kvm` is faster where /dev/kvm is a real one (it hangs in a VM without
    nested virtualisation)."""

    sandbox_uids: tuple[int, int] = (1_879_048_192, 1_879_113_727)
    """Run as root, each isolated process sandbox runs as a uid of its own from this range
    (`first-last`, set apart for it: no account or other tool of the host may use it). The
    default is a range systemd leaves unused."""

    sandbox_template: bool = True
    """Fork each isolated process sandbox's server from a template process that has loaded the
    agent server and litellm already (its pages shared by every sandbox, its first model call
    waiting for no import), rather than start an interpreter per sandbox. Root with bubblewrap
    only (the fork enters the sandbox's namespaces); a start spawns as before while the
    template loads or when it is gone."""

    shared_host: bool = False
    """Accept sandboxes of several users where they are not isolated (no bubblewrap, or
    isolation off). Without it such a control plane serves the first user to have a sandbox
    and refuses others (403)."""

    sandbox_network: Literal["auto", "isolated", "host"] = "auto"
    """Process sandboxes behind a network boundary: each in a network namespace of its own,
    linked to this host by a veth pair and held to its egress policy by nftables rules
    (`control_plane.network`): where this control plane can make them (root, bubblewrap;
    `auto`, the log says at start which it is), always (`isolated`: it does not start
    without), or never (`host`: sandboxes share this host's network, its loopback services
    and each other's ports included)."""

    sandbox_subnet: ipaddress.IPv4Network = ipaddress.IPv4Network("10.213.0.0/16")
    """The process sandboxes' addresses (a /16 to /28 no network of this host uses; each
    deployment on one host its own): the first is this control plane's on the sandboxes' side
    (their webhook, LLM gateway and resolver), each sandbox gets one of the rest."""

    sandbox_dns_upstream: tuple[str, ...] = ()
    """The resolvers the control plane's sandbox resolver asks (`address` or `address:port`,
    comma-separated); default: this host's /etc/resolv.conf."""

    llm_daily_budget_usd: float | None = Field(default=None, gt=0)
    """What one user's sandboxes may spend on the LLM through the gateway per UTC day (USD,
    as litellm prices the calls); past it the gateway refuses until midnight UTC. A user's
    own `llm_daily_budget_usd` setting may lower it, never raise it. Unset: no cap."""

    llm_requests_per_minute: int | None = Field(default=None, ge=1)
    """LLM requests one user's sandboxes may make through the gateway per minute; a user's own
    setting may lower it. Unset: no cap."""

    sandbox_image: str = "agent-server"
    """The Docker provider's image (`make image` builds it from sandbox.Dockerfile)."""

    docker_url: str = "unix:///var/run/docker.sock"
    """The Docker provider's Engine API address (unix://, tcp:// or ssh://); the Swarm
    provider's is a manager's."""

    sandbox_runtime: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    """The OCI runtime the Docker provider runs each sandbox's container with, as the daemon
    names it: `runsc` (gVisor; registered in the daemon's daemon.json, docs/gvisor.md) gives
    every sandbox a kernel of its own instead of the host's. Unset: the daemon's default
    (runc). A daemon that does not know it is said at start, and fails each sandbox start.
    On Swarm (whose services cannot name a runtime) it is the runtime the nodes that take
    sandboxes must have as their default; each sandbox's node fence checks it (docs/gvisor.md)."""

    docker_network: str = Field(
        default="agent-sandboxes", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
    )
    """The Docker provider's bridge network, made by it when missing, with inter-container
    traffic off: sandboxes reach this control plane and the outside, not each other."""

    warm_pool: int = Field(default=0, ge=0, le=64)
    """Sandboxes the provider keeps started for new ones: a start takes one and only hands it
    its keys (Docker: about 0.12 s to READY instead of 1.0). Each holds what an idle sandbox holds
    (a Docker one about 170 MiB) while it waits and no key; none is shared, a taken one is
    replaced in the background. The process provider parks servers forked from its template
    (`CONTROL_PLANE_SANDBOX_TEMPLATE`, as root), and none without it."""

    sandbox_memory_limit: ByteSize = Field(default=ByteSize(4 * 1024**3), ge=64 * 1024**2)
    """Memory of one sandbox (bytes, or with a unit: `4GiB`, `512MiB`): a container's, or a
    process sandbox's cgroup where the control plane runs as root (its largest process is
    killed past it)."""

    sandbox_cpu_limit: float = Field(default=2.0, gt=0, le=1024)
    """CPUs one sandbox may use (fractions allowed), container or process."""

    sandbox_pids_limit: int = Field(default=1024, ge=16, le=4_194_304)
    """Processes and threads of one sandbox, container or process (a fork bomb stops there)."""

    sandbox_disk_limit: ByteSize = Field(default=ByteSize(8 * 1024**3), ge=0)
    """Disk of one isolated process or Docker sandbox (bytes, or with a unit): its directory
    (a container's volume) is a filesystem of that size of its own, where the control plane runs
    as root (for Docker: on the daemon's host; a sparse image: the host gives only what is
    written). 0: none, the sandboxes share the host's disk. Swarm sandboxes have none yet."""

    swarm_network: str = Field(default="bridge", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    """The Swarm provider's network: `bridge`, each node's default bridge (every node that
    takes sandboxes runs its daemon with `"icc": false`; docs/deployment.md), or a swarm-scoped
    bridge made from a config-only network with inter-container traffic off on every node."""

    swarm_constraints: tuple[str, ...] = ()
    """Placement constraints of every Swarm sandbox, comma-separated
    (`node.labels.sandboxes==true,node.role==worker`)."""

    swarm_cpu_reservation: float = Field(default=0.0, ge=0, le=1024)
    """CPUs reserved for each Swarm sandbox: the scheduler places it only where they are free."""

    swarm_memory_reservation: ByteSize = Field(default=ByteSize(0), ge=0)
    """Memory reserved for each Swarm sandbox (bytes, or with a unit)."""

    swarm_placement_timeout: float = Field(default=30.0, gt=0)
    """Seconds a Swarm sandbox's task may wait for a node to take it before its start fails
    with the scheduler's reason."""

    swarm_node_docker_socket: str = "/var/run/docker.sock"
    """The Docker socket's path on every node of the swarm, bound into the short job that
    removes a deleted sandbox's volume on its node."""

    sandbox_start_timeout: float = Field(default=60.0, gt=0)
    """Seconds an agent server may take to answer /alive before its sandbox is ERROR."""

    sandbox_stop_grace: float = Field(default=5.0, ge=0)
    """Seconds between SIGTERM and SIGKILL when a sandbox is destroyed."""

    health_interval: float = Field(default=5.0, gt=0)
    """Seconds between health checks of running sandboxes (the reconciler's round is the
    shorter of this and `lifecycle_interval`)."""

    health_grace: float = Field(default=30.0, ge=0)
    """Seconds a RUNNING sandbox may fail its health check before it is ERROR (read-only)."""

    pause_grace: float = Field(default=30.0, ge=0)
    """Seconds the agent server is given to pause running conversations (between steps)
    before their sandbox is frozen."""

    lease_seconds: float = Field(default=15.0, gt=0)
    """Length of a control plane's lease on a start task or a sandbox (renewed every third of
    it); another control plane on the same database takes over this long after its holder died."""

    idle_seconds: float | None = Field(default=1800.0, gt=0)
    """A RUNNING sandbox without activity this long is paused (SPEC 3.1 Idle Time); unset: never."""

    sandbox_hibernation: Literal["idle", "always", "off"] = "idle"
    """Which pauses hibernate a sandbox where its provider can (process sandboxes): its
    processes end, its files stay (workspace, state, disk), so it holds no memory; its resume
    starts a new server that picks its conversations up (a run paused by the pause goes on;
    shells and background processes of the agent are gone). `idle`: the pauses the timers make
    (idle, the 12-hour cap); `always`: every pause; `off`: none (a pause freezes)."""

    deletion_seconds: float | None = Field(default=7 * 86400.0, gt=0)
    """A sandbox PAUSED this long is deleted with its conversations (SPEC 3.1 Deletion Time)."""

    lifecycle_interval: float = Field(default=10.0, gt=0)
    """Seconds between rounds of the idle, 12-hour and deletion timers."""

    agent_timeout: float = Field(default=30.0, gt=0)
    """Timeout of one request to an agent server."""

    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    """Largest request body of the application routes (413 beyond)."""

    max_webhook_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    """Largest webhook batch (the agent server sends up to 100 events per batch)."""

    webhook_batches_per_sandbox: int = Field(default=4, ge=1, le=1000)
    """Webhook batches one sandbox may have in flight at once; one more is answered 429 with
    Retry-After, and the agent server sends it again then."""

    webhook_conversations_per_sandbox: int = Field(default=500, ge=1, le=100_000)
    """Conversations made straight on one sandbox's agent server (and sub-agents' children)
    that the webhook records; past it, a new one's posts are answered 429 and kept by the
    agent server until one of that sandbox's conversations is deleted."""

    webhook_bytes_in_flight: ByteSize = Field(default=ByteSize(64 * 1024**2), ge=1024)
    """Webhook bodies received and stored at once over all sandboxes (bytes, or with a unit);
    a batch holds a few times its size in memory meanwhile. One more is answered 429 (a batch
    alone always goes)."""

    stop_sandboxes_on_exit: bool = False
    """Destroy every sandbox when the control plane stops. Off by default: sandboxes keep
    running and the next start adopts them."""

    @field_validator("state_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser().absolute()

    @field_validator("sandbox_uids", mode="before")
    @classmethod
    def _uid_range(cls, value: Any) -> Any:
        if isinstance(value, str):
            first, sep, last = value.partition("-")
            if not sep or not first.strip().isdigit() or not last.strip().isdigit():
                raise ValueError("a uid range is first-last, e.g. 1879048192-1879113727")
            return int(first), int(last)
        return value

    @field_validator("sandbox_uids")
    @classmethod
    def _uids_apart(cls, value: tuple[int, int]) -> tuple[int, int]:
        first, last = value
        if not 1000 <= first <= last < 2**31:
            raise ValueError("the uid range must lie within 1000-2147483647, first <= last")
        return value

    @field_validator("sandbox_disk_limit")
    @classmethod
    def _disk(cls, value: ByteSize) -> ByteSize:
        if 0 < value < 64 * 1024**2:
            raise ValueError("a sandbox's disk is 0 (none) or at least 64MiB")
        return value

    @field_validator("sandbox_subnet")
    @classmethod
    def _subnet(cls, value: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        if not 16 <= value.prefixlen <= 28:
            raise ValueError("the sandbox subnet is a /16 to /28")
        return value

    @field_validator("swarm_constraints", "sandbox_dns_upstream", mode="before")
    @classmethod
    def _constraint_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("database_url")
    @classmethod
    def _driver(cls, value: str | None) -> str | None:
        # The plain forms are what people paste; the store needs the async drivers.
        if value and value.startswith(("postgresql://", "postgres://")):
            return "postgresql+asyncpg://" + value.split("://", 1)[1]
        if value and value.startswith("sqlite:///"):
            return "sqlite+aiosqlite:///" + value.split(":///", 1)[1]
        return value or None

    @model_validator(mode="after")
    def _containers_reach_the_webhook(self) -> Config:
        # A container reaches this host through its bridge gateway (host.docker.internal), so
        # a control plane listening on loopback alone cannot be reached from its sandboxes.
        if self.sandbox_provider == "docker" and self.public_url is None and is_loopback(self.host):
            raise ValueError(
                "the docker provider's containers cannot reach a control plane that listens on "
                f"{self.host} only: listen on 0.0.0.0 or the docker0 bridge's address "
                "(CONTROL_PLANE_HOST), or set CONTROL_PLANE_PUBLIC_URL to an address they reach"
            )
        if self.sandbox_provider == "swarm":
            public = urlsplit(self.public_url or "").hostname or ""
            if is_loopback(public) or public in ("", "0.0.0.0", "::"):
                raise ValueError(
                    "the swarm provider's sandboxes run on other machines: set "
                    "CONTROL_PLANE_PUBLIC_URL to an address of this control plane every node "
                    "reaches (not loopback, not a wildcard)"
                )
        if self.sandbox_runtime is not None and self.sandbox_provider == "process":
            raise ValueError(
                "CONTROL_PLANE_SANDBOX_RUNTIME names the Docker or Swarm providers' "
                "runtime (process sandboxes: CONTROL_PLANE_SANDBOX_ISOLATION=gvisor)"
            )
        if (
            self.sandbox_runtime is not None
            and self.sandbox_provider == "swarm"
            and self.sandbox_network == "host"
        ):
            raise ValueError(
                "CONTROL_PLANE_SANDBOX_RUNTIME on Swarm is checked by the nodes' "
                "fences, which CONTROL_PLANE_SANDBOX_NETWORK=host turns off"
            )
        return self

    @property
    def tracing_enabled(self) -> bool:
        """Spans get ids: asked for, or wanted by an exporter or by JSON logs (their ids)."""
        wanted = bool(self.otlp_traces_endpoint) or self.log_format == "json"
        return self.tracing == "on" or (self.tracing == "auto" and wanted)

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{self.state_dir / 'control-plane.db'}"

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    @property
    def sandbox_port(self) -> int:
        """The port sandboxes behind the boundary reach this control plane on (at their
        gateway): the public URL's, so every control plane of a deployment listens on the same
        one there (shared: a sandbox reaches whichever is up), else its own."""
        if self.public_url:
            parts = urlsplit(self.public_url)
            return parts.port or (443 if parts.scheme == "https" else 80)
        return self.port

    @property
    def sandboxes_dir(self) -> Path:
        """Where each sandbox's own directory is made (`SandboxProvider.root_dir`)."""
        return self.state_dir / "sandboxes"

    @property
    def webhook_base(self) -> str:
        """What each sandbox gets as its webhook URL (`launch.env.LaunchEnv.webhook_url`); it
        appends /events/{id}."""
        return self.base_url + "/api/v1/webhooks"

    @property
    def reconcile_interval(self) -> float:
        """The reconciler's one loop: timers and health checks in each round."""
        return min(self.health_interval, self.lifecycle_interval)


#: Field name -> its variable.
VARIABLES = config.variables(Config, PREFIX)


def from_env(environ: Mapping[str, str] | None = None, **flags: Any) -> Config:
    """Variables, then flags given (not None, by field name) on top; empty variables count as
    unset."""
    env = os.environ if environ is None else environ
    return config.from_env(Config, PREFIX, env, flags, otlp_traces_endpoint=otlp_endpoint(env))
