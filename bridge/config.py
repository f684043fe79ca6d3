"""Config: flags and environment -> what the bridge connects to and how; read once, here.

Credentials come from the environment (an editor's `env` setting) or flags, and are held as
SecretStr: never printed, never logged, never in an error.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator

from bridge.modes import MODE_IDS, ModeId

PREFIX = "AGENT_SERVER_ACP_"


class ConfigError(Exception):
    """A configuration the bridge cannot start with (said on stderr, exit status 2)."""


class Config(BaseModel):
    """What `agent-server acp` talks to, and its bounds."""

    target: Literal["agent-server", "control-plane"]
    """An agent server (URL and its session key) or a control plane (URL and an account key)."""
    url: str = Field(pattern=r"^https?://[^\s/?#]+[^\s?#]*$")
    """The service's base URL (http or https; no query)."""
    key: SecretStr
    """The session key (X-Session-API-Key) or the account key (Authorization: Bearer)."""
    approval: ModeId = "always-ask"
    """The approval mode of new and loaded sessions (the editor can change it per session)."""
    working_dir: str | None = None
    """Agent server only: the conversations' working directory on the server, instead of the
    editor's working directory (which suits a server on the editor's own machine)."""
    agent: dict[str, Any] | None = None
    """Agent server only: the conversations' agent (POST /api/conversations' `agent`);
    without it the server's stored settings choose, and the editor's MCP servers cannot be
    added."""
    timeout: float = Field(default=30.0, gt=0, le=600)
    """Seconds one HTTP request may take."""
    reconnect_timeout: float = Field(default=30.0, gt=0, le=3600)
    """Seconds a dropped event stream is tried again before the prompt in flight fails."""
    start_timeout: float = Field(default=300.0, gt=0, le=3600)
    """Control plane only: seconds a start task may take to be READY."""
    log_level: Literal["debug", "info", "warning", "error"] = "warning"
    """Logs go to stderr (stdout is the protocol)."""

    @field_validator("working_dir")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError("the working directory on the server must be an absolute path")
        return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="agent-server acp",
        description="Speak the Agent Client Protocol on stdin and stdout for an editor, and run "
        "its sessions as conversations of an agent server or a control plane.",
    )
    parser.add_argument(
        "--agent-server",
        metavar="URL",
        help="an agent server's base URL (AGENT_SERVER_URL); its session key "
        "comes from SESSION_API_KEY",
    )
    parser.add_argument(
        "--control-plane",
        metavar="URL",
        help="a control plane's base URL (CONTROL_PLANE_URL); the account key "
        "comes from CONTROL_PLANE_API_KEY",
    )
    parser.add_argument(
        "--session-api-key",
        metavar="KEY",
        help="the agent server's key (prefer SESSION_API_KEY: flags show in ps)",
    )
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help="the account key (prefer CONTROL_PLANE_API_KEY: flags show in ps)",
    )
    parser.add_argument(
        "--approval",
        choices=MODE_IDS,
        help=f"approval mode of new sessions ({PREFIX}APPROVAL, default always-ask)",
    )
    parser.add_argument(
        "--working-dir",
        metavar="DIR",
        help=f"agent server: the conversations' working directory on the server "
        f"({PREFIX}WORKING_DIR; default: the editor's)",
    )
    parser.add_argument(
        "--agent-file",
        metavar="FILE",
        help=f"agent server: a JSON file holding the conversations' agent "
        f"({PREFIX}AGENT_FILE; default: the server's settings)",
    )
    parser.add_argument("--timeout", type=float, help=f"seconds per request ({PREFIX}TIMEOUT)")
    parser.add_argument(
        "--reconnect-timeout",
        type=float,
        help=f"seconds a dropped stream is retried ({PREFIX}RECONNECT_TIMEOUT)",
    )
    parser.add_argument(
        "--start-timeout",
        type=float,
        help=f"control plane: seconds a start may take ({PREFIX}START_TIMEOUT)",
    )
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        help=f"stderr log level ({PREFIX}LOG_LEVEL, default warning)",
    )
    return parser.parse_args(argv)


def _agent(path: str | None) -> dict[str, Any] | None:
    if not path:
        return None
    try:
        data = json.loads(Path(path).expanduser().read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read the agent file {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"the agent file {path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"the agent file {path} must hold a JSON object (the `agent`)")
    return data


def load(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    args = parse_args(argv)
    env = os.environ if environ is None else environ
    if args.agent_server and args.control_plane:
        raise ConfigError("give --agent-server or --control-plane, not both")
    server_url = args.agent_server or (None if args.control_plane else env.get("AGENT_SERVER_URL"))
    plane_url = args.control_plane or (None if args.agent_server else env.get("CONTROL_PLANE_URL"))
    if server_url and plane_url:
        raise ConfigError(
            "both AGENT_SERVER_URL and CONTROL_PLANE_URL are set: give one, or "
            "choose with --agent-server or --control-plane"
        )
    if not server_url and not plane_url:
        raise ConfigError(
            "nothing to connect to: set AGENT_SERVER_URL (with SESSION_API_KEY) or "
            "CONTROL_PLANE_URL (with CONTROL_PLANE_API_KEY)"
        )
    if server_url:
        target, url = "agent-server", server_url
        key = args.session_api_key or env.get("SESSION_API_KEY")
        if not key:
            raise ConfigError("an agent server needs its session key: set SESSION_API_KEY")
    else:
        target, url = "control-plane", plane_url
        key = args.api_key or env.get("CONTROL_PLANE_API_KEY")
        if not key:
            raise ConfigError("a control plane needs an account key: set CONTROL_PLANE_API_KEY")
    values: dict[str, Any] = {"target": target, "url": url, "key": key}
    optional = {
        "approval": args.approval or env.get(PREFIX + "APPROVAL"),
        "working_dir": args.working_dir or env.get(PREFIX + "WORKING_DIR"),
        "agent": _agent(args.agent_file or env.get(PREFIX + "AGENT_FILE")),
        "timeout": args.timeout or env.get(PREFIX + "TIMEOUT"),
        "reconnect_timeout": args.reconnect_timeout or env.get(PREFIX + "RECONNECT_TIMEOUT"),
        "start_timeout": args.start_timeout or env.get(PREFIX + "START_TIMEOUT"),
        "log_level": args.log_level or env.get(PREFIX + "LOG_LEVEL"),
    }
    values.update({k: v for k, v in optional.items() if v is not None})
    if target == "control-plane" and (values.get("working_dir") or values.get("agent")):
        raise ConfigError(
            "--working-dir and --agent-file are for an agent server: a control "
            "plane chooses the workspace and the agent from the user's settings"
        )
    try:
        return Config.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
            for e in exc.errors(include_input=False)
        )
        raise ConfigError(problems) from None


__all__ = ["Config", "ConfigError", "load"]
