"""The launch environment: the variables a launcher sets for a sandbox's agent server.

The agent server reads each setting from the variable PREFIX + its field's name in capitals
(`web.config`, with `agent_server.config.ENV_PREFIX` being this PREFIX); a launcher (the
process provider, the Docker and Swarm providers, the sandbox template) builds them here by
field name, so a name cannot be spelled one way on one side and another way on the other.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: Every variable of the agent server starts with it.
PREFIX = "AGENT_SERVER_"


#: Fields set through a standard variable rather than one of the server's own.
STANDARD = {"traces_url": "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}


def variable(field: str) -> str:
    """The variable that sets the agent server's setting `field`."""
    return PREFIX + field.upper()


class LaunchEnv(BaseModel):
    """What a launcher tells a sandbox's server through its environment; a field left None is
    not set (the server's default, or the image's variable, holds). Never a key: the keys come
    over a pipe (`keys_fd`, `launch.keys`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    keys_fd: int | None = Field(default=None, ge=0)
    """The descriptor the keys come on (read by `agent_server.secrecy`, not a setting)."""
    host: str | None = None
    port: int | None = Field(default=None, ge=0, le=65535)
    webhook_url: str | None = None
    """Base of the control plane's webhook; the server appends /events/{id}."""
    state_dir: str | None = None
    working_dir: str | None = None
    ready_file: str | None = None
    """Where the server says it is serving (`launch.ready`): also how a restarted control
    plane finds a sandbox's processes again (this entry in their environment)."""
    log_level: str | None = None
    ready_fd: int | None = Field(default=None, ge=0)
    """The pipe the server says it is serving on (`launch.ready`)."""
    traces_url: str | None = None
    """Where the server sends its spans (OTLP/HTTP): OpenTelemetry's own variable, which the
    server reads as every OpenTelemetry program does."""

    def environment(self) -> dict[str, str]:
        """Variable -> value of every field set, in the fields' order."""
        return {
            STANDARD.get(name) or variable(name): str(value)
            for name, value in self
            if value is not None
        }

    def entries(self) -> list[str]:
        """`NAME=value` of every field set (a container's `Env`, an environ's entries)."""
        return [f"{name}={value}" for name, value in self.environment().items()]


#: The variable naming the keys' descriptor.
KEYS_FD = variable("keys_fd")
