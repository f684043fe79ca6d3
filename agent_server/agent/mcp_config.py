"""A conversation's `agent.mcp_config`: its shape, checked at creation, its `${NAME}`
placeholders filled from the conversation's secrets, and masked for responses (SPEC 2.5).

It has the common `{"mcpServers": {name: {...}}}` shape: `command`, `args`, `env` (and `cwd`)
for a server run over stdio; `url` and `headers` for streamable HTTP (or `"type": "sse"`).
Optional per server: `timeout` (seconds per call), `startup_timeout`, `disabled`.
Placeholders anywhere in it are filled just before a connection opens (agent.mcp);
check_config() refuses, at creation, a config where one cannot be.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.ids import PLACEHOLDER

STARTUP_TIMEOUT = 30.0
CALL_TIMEOUT = 300.0
MAX_SERVERS = 20

STDIO, HTTP, SSE = "stdio", "http", "sse"
TRANSPORTS = {
    "stdio": STDIO,
    "http": HTTP,
    "streamable-http": HTTP,
    "streamable_http": HTTP,
    "streamableHttp": HTTP,
    "sse": SSE,
}


@dataclass(frozen=True)
class ServerSpec:
    """One entry of mcpServers, placeholders filled."""

    name: str
    transport: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    call_timeout: float = CALL_TIMEOUT
    startup_timeout: float = STARTUP_TIMEOUT


Problem = tuple[list[str | int], str, str]  # loc under mcp_config, message, type


def servers_of(config: Mapping[str, Any] | None) -> dict[str, Any]:
    if not config:
        return {}
    servers = config.get("mcpServers", config.get("mcp_servers", {}))
    return servers if isinstance(servers, dict) else {}


def check_config(config: Mapping[str, Any] | None, secrets: Mapping[str, str]) -> list[Problem]:
    """What is wrong with an mcp_config (shape, or a placeholder no secret fills)."""
    if not config:
        return []
    key = "mcp_servers" if "mcp_servers" in config and "mcpServers" not in config else "mcpServers"
    servers = config.get(key, {})
    if not isinstance(servers, dict):
        return [
            ([key], "mcpServers must be an object: server name -> its configuration", "dict_type")
        ]
    problems: list[Problem] = []
    if len(servers) > MAX_SERVERS:
        problems.append(([key], f"at most {MAX_SERVERS} MCP servers", "too_long"))
    for name, entry in servers.items():
        loc: list[str | int] = [key, name]
        if not name or len(name) > 64:
            problems.append((loc, "a server name has 1 to 64 characters", "value_error"))
        try:
            spec(name, entry, {}, fill_placeholders=False)
        except ValueError as exc:
            problems.append((loc, str(exc), "value_error"))
    for path, missing in _missing(config, secrets):
        problems.append(
            (
                path,
                f"No secret named {missing!r} for the placeholder ${{{missing}}}: placeholders "
                "in mcp_config are filled from the conversation's secrets (the request's "
                "`secrets` or the settings' secrets)",
                "missing_secret",
            )
        )
    return problems


def _missing(
    value: Any, secrets: Mapping[str, str], path: list[str | int] | None = None
) -> list[tuple[list[str | int], str]]:
    path = path or []
    out: list[tuple[list[str | int], str]] = []
    if isinstance(value, str):
        out += [(path, m) for m in PLACEHOLDER.findall(value) if m not in secrets]
    elif isinstance(value, dict):
        for k, v in value.items():
            out += _missing(k, secrets, path + [k])
            out += _missing(v, secrets, path + [k])
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _missing(v, secrets, path + [i])
    return out


def fill(value: Any, secrets: Mapping[str, str]) -> Any:
    """`value` with every `${NAME}` replaced by the secret NAME (KeyError when one is missing)."""
    if isinstance(value, str):
        return PLACEHOLDER.sub(lambda m: secrets[m.group(1)], value)
    if isinstance(value, dict):
        return {fill(k, secrets): fill(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, secrets) for v in value]
    return value


def spec(
    name: str, entry: Any, secrets: Mapping[str, str], *, fill_placeholders: bool = True
) -> ServerSpec:
    """One server's entry -> ServerSpec (KeyError: a missing secret; ValueError: its shape)."""
    if not isinstance(entry, dict):
        raise ValueError("a server entry must be an object with `command` or `url`")
    data = fill(entry, secrets) if fill_placeholders else entry
    kind = data.get("type", data.get("transport"))
    if kind is None:
        kind = STDIO if "command" in data else HTTP if "url" in data else None
    if kind is None:
        raise ValueError("a server entry needs `command` (stdio) or `url` (streamable HTTP)")
    if kind not in TRANSPORTS:
        raise ValueError(f"unknown transport {kind!r}; use stdio, http (streamable HTTP) or sse")
    transport = TRANSPORTS[kind]
    timeouts = {}
    for key, default in (("timeout", CALL_TIMEOUT), ("startup_timeout", STARTUP_TIMEOUT)):
        value = data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 3600:
            raise ValueError(f"`{key}` is a number of seconds between 0 and 3600")
        timeouts[key] = float(value)
    if transport == STDIO:
        command, args, env = data.get("command"), data.get("args", []), data.get("env") or {}
        if not isinstance(command, str) or not command:
            raise ValueError("`command` must be a non-empty string")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError("`args` must be a list of strings")
        if not _str_map(env):
            raise ValueError("`env` must map names to strings")
        cwd = data.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ValueError("`cwd` must be a string")
        return ServerSpec(
            name,
            transport,
            command=command,
            args=tuple(args),
            env=dict(env),
            cwd=cwd,
            call_timeout=timeouts["timeout"],
            startup_timeout=timeouts["startup_timeout"],
        )
    url, headers = data.get("url"), data.get("headers") or {}
    if not isinstance(url, str) or not re.match(r"^https?://", url):
        raise ValueError("`url` must be an http:// or https:// address")
    if not _str_map(headers):
        raise ValueError("`headers` must map names to strings")
    return ServerSpec(
        name,
        transport,
        url=url,
        headers=dict(headers),
        call_timeout=timeouts["timeout"],
        startup_timeout=timeouts["startup_timeout"],
    )


def _str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


__all__ = [
    "Problem",
    "ServerSpec",
    "check_config",
    "fill",
    "servers_of",
    "spec",
]
