"""Config: everything the server is told at start, from flags and environment variables."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.net import is_loopback
from launch.env import PREFIX
from web import config
from web.config import Env
from web.telemetry import TraceSampler, otlp_endpoint

#: The variables' prefix, the launchers' own (`launch.env`): one spelling for both sides.
ENV_PREFIX = PREFIX


class ConfigError(Exception):
    """The configuration cannot be used; the message says which setting and why."""


class DeliverySettings(BaseModel):
    """Limits and schedules of delivery. Each field can be set by the variable
    AGENT_SERVER_<FIELD NAME IN CAPITALS>, e.g. AGENT_SERVER_WS_QUEUE_EVENTS=1000."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    ws_queue_events: int = Field(default=4096, ge=1)
    """Events a socket may have waiting to be sent; past it the socket closes with 1013."""

    ws_queue_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """Bytes a socket may have waiting to be sent; past it the socket closes with 1013."""

    ws_send_timeout: float = Field(default=10.0, gt=0)
    """Seconds one frame may wait to be handed to a socket; past it (the client has left
    more unread than the kernel's buffers hold) the socket closes with 1013."""

    ws_max_subscribers: int = Field(default=100, ge=1)
    """Sockets per conversation; one more is closed with 1013."""

    ws_auth_timeout: float = Field(default=10.0, gt=0)
    """Seconds a socket without a key in its header or query has to send its auth frame."""

    ws_ping_interval: float = Field(default=20.0, gt=0)
    """Seconds between the server's pings on a socket, and how long one may go unanswered
    before the socket closes with 1013."""

    webhook_batch_events: int = Field(default=100, ge=1)
    """Events per webhook request at most."""

    webhook_batch_ms: float = Field(default=250.0, ge=0)
    """How long a few events wait for more before they are sent (milliseconds)."""

    webhook_batch_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    """Body size a batch stops growing at (one event larger than this still goes, alone)."""

    webhook_retry_min: float = Field(default=1.0, gt=0)
    """First retry delay (seconds); it doubles on each failure, with jitter."""

    webhook_retry_max: float = Field(default=60.0, gt=0)
    """Longest retry delay (seconds); also the delay after a refusal (a 4xx)."""

    webhook_timeout: float = Field(default=30.0, gt=0)
    """Seconds a webhook request may take."""

    webhook_concurrency: int = Field(default=32, ge=1)
    """Webhook requests in flight at once, over all conversations (one per conversation)."""

    shutdown_flush: float = Field(default=4.0, ge=0)
    """Seconds the webhook may keep sending at shutdown."""


class Config(BaseModel):
    """Every setting of the agent server. A field is set by the variable AGENT_SERVER_<NAME>
    and the flag --<name> (see `web.config`); the keys and the OTLP endpoint come from their
    own standard variables."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    host: str = "127.0.0.1"
    """Address to listen on. A non-loopback address needs SESSION_API_KEY."""

    port: int = Field(default=8000, ge=0, le=65535)
    """TCP port (0 picks a free one)."""

    state_dir: Path = Path("~/.local/state/agent-server")
    """Where conversations, their logs and the settings live."""

    session_api_keys: Annotated[tuple[str, ...], Env(None)] = ()
    """Keys accepted in X-Session-API-Key (SESSION_API_KEY, comma-separated); several allow
    rotation. Never logged."""

    generated_key: Annotated[bool, Env(None)] = False
    """True when no key was configured and one was made up at start (printed once)."""

    log_level: str = "info"
    """Python logging level for the server's own logs (stderr)."""

    working_dir: Path | None = None
    """Working directory of conversations created without one (default:
    <state_dir>/workspace)."""

    terminal_idle_timeout: float = Field(default=600.0, gt=0)
    """Seconds a conversation's shell may sit unused before it is closed."""

    max_subagents: int = Field(default=200, ge=0, le=100_000)
    """Sub-agent conversations on this server at once, over all trees (each parent's own caps
    multiply with depth): one more is refused to the calling tool."""

    max_file_bytes: int = Field(default=50 * 1024 * 1024, ge=1)
    """Largest workspace file the file, diff and upload routes move (413 beyond)."""

    webhook_url: str | None = None
    """Base address of the control plane's webhook (events go to {url}/events/{id})."""

    webhook_api_key: Annotated[str | None, Env("AGENT_SERVER_WEBHOOK_API_KEY", flag=False)] = None
    """X-Session-API-Key sent to the webhook; default: the first session key, unless the
    deliveries are signed (`webhook_secret`): then none is sent, so a receiver that is not
    the control plane learns nothing that opens this server."""

    webhook_secret: Annotated[str | None, Env("AGENT_SERVER_WEBHOOK_SECRET", flag=False)] = None
    """When set, webhook bodies are signed the Standard Webhooks way."""

    webhook_sender: Annotated[str | None, Env("AGENT_SERVER_WEBHOOK_SENDER", flag=False)] = Field(
        default=None, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$"
    )
    """Who this server is to its webhook (`X-Webhook-Sender`: a control plane's sandbox id),
    so the receiver knows whose secret checks the signature."""

    network_url: str | None = Field(default=None, pattern=r"^https?://")
    """Where this sandbox's control plane says what its network policy refused it (`GET`, with
    `network_token`); None: no sandbox network to speak of (`agent_server.network`)."""

    network_token: Annotated[str | None, Env("AGENT_SERVER_NETWORK_TOKEN", flag=False)] = None
    """The sandbox's own credential for `network_url` (a Bearer token). Never logged."""

    chromium: str = "/usr/bin/chromium"
    """The browser tool's Chromium (Playwright's own download is never used)."""

    delivery: DeliverySettings = Field(default_factory=DeliverySettings)
    """Websocket and webhook limits (AGENT_SERVER_WS_* and AGENT_SERVER_WEBHOOK_*)."""

    log_format: Literal["text", "json"] = "text"
    """text: one escaped line per record; json: one object per line (time, level, logger,
    message, conversation_id, trace_id, span_id)."""

    tracing: Literal["auto", "on", "off"] = "auto"
    """auto: spans are recorded and exported when an OTLP endpoint is configured; on: recorded
    even without one (trace ids in logs); off: never."""

    otlp_traces_endpoint: Annotated[str | None, Env(None)] = Field(
        default=None, pattern=r"^https?://"
    )
    """Where spans go over OTLP/HTTP (protobuf), from the standard OTEL_EXPORTER_OTLP_*
    variables; None: nowhere."""

    traces_sampler: Annotated[TraceSampler, Env("OTEL_TRACES_SAMPLER", flag=False)] = (
        "parentbased_always_on"
    )
    """Which traces are kept, by the standard OTEL_TRACES_SAMPLER (its built-in names; the
    parent-based ones follow the caller's `traceparent`)."""

    traces_sampler_arg: Annotated[float, Env("OTEL_TRACES_SAMPLER_ARG", flag=False)] = Field(
        default=1.0, ge=0, le=1
    )
    """The share of traces kept by the traceidratio samplers (OTEL_TRACES_SAMPLER_ARG)."""

    metrics_open: bool = False
    """GET /metrics answers without the session key (for scrapers that cannot send it)."""

    ready_file: Path | None = None
    """Once serving, {"port", "pid"} is written there atomically: tells a supervisor the
    bound port (with port 0, only the bound socket knows it)."""

    ready_fd: int | None = Field(default=None, ge=0)
    """Once serving, the same {"port", "pid"} is written to this descriptor (a pipe its
    supervisor reads), which is then closed: the supervisor wakes at once, polls nothing."""

    @field_validator("traces_sampler", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("state_dir", "working_dir", "ready_file")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return None if value is None else value.expanduser().absolute()

    @property
    def workspace(self) -> Path:
        """The working directory of conversations created without one."""
        return self.working_dir or self.state_dir / "workspace"

    @property
    def tracing_enabled(self) -> bool:
        return self.tracing == "on" or (self.tracing == "auto" and bool(self.otlp_traces_endpoint))

    def own_keys(self) -> dict[str, str]:
        """The server's own keys by name: masked wherever a conversation's events go (an agent
        that read one must not hand it to the log, the webhook or a socket)."""
        keys = {f"SESSION_API_KEY_{i}": k for i, k in enumerate(self.session_api_keys)}
        for name in ("webhook_api_key", "webhook_secret", "network_token"):
            value = getattr(self, name)
            if value:
                keys[name] = value
        return keys

    def check(self) -> None:
        """Refuse to serve beyond this machine without a configured key."""
        if self.generated_key and not is_loopback(self.host):
            raise ConfigError(
                f"refusing to listen on {self.host} without SESSION_API_KEY: "
                "set it, or listen on 127.0.0.1"
            )
        if self.network_url and not self.network_token:
            raise ConfigError(
                "AGENT_SERVER_NETWORK_URL is set without AGENT_SERVER_NETWORK_TOKEN: "
                "the control plane answers it to the sandbox's token only"
            )


def keys_from_env(value: str | None) -> tuple[tuple[str, ...], bool]:
    """SESSION_API_KEY (comma-separated) -> keys, or one fresh key when none is set."""
    keys = tuple(k.strip() for k in (value or "").split(",") if k.strip())
    if keys:
        return keys, False
    return (secrets.token_urlsafe(32),), True


def otlp_traces_endpoint(env: Mapping[str, str]) -> str | None:
    """The OTLP/HTTP traces URL the standard variables give (`web.telemetry.otlp_endpoint`)."""
    try:
        return otlp_endpoint(env)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def from_env(environ: Mapping[str, str] | None = None, **flags: object) -> Config:
    """The Config from the environment, flags given (not None, by field name) on top."""
    env = os.environ if environ is None else environ
    keys, generated = keys_from_env(env.get("SESSION_API_KEY"))
    return config.from_env(
        Config,
        ENV_PREFIX,
        env,
        flags,
        session_api_keys=keys,
        generated_key=generated,
        otlp_traces_endpoint=otlp_traces_endpoint(env),
    )
