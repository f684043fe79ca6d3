"""The editor's MCP servers (session/new) as the service takes them: `mcpServers` entries
(`{command, args, env}` or `{url, headers}`), the control plane's plugins being the same
entries with a name.

An environment variable or header whose name says it holds a credential (KEY, TOKEN,
SECRET, PASSWORD, AUTH...) becomes a conversation secret referred to as `${NAME}`: the
service fills it in when it starts the MCP server and masks the value in every event (an MCP
tool that echoes its key shows `<secret-hidden>`). Other values (paths, flags) stay as they
are: masking them would hide ordinary text all over the transcript.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from acp.schema import HttpMcpServer, McpServerStdio

from core.masking import MIN_LENGTH

logger = logging.getLogger(__name__)

#: The names the control plane's plugins take (and the agent server's servers).
_NAME = re.compile(r"[^A-Za-z0-9_-]")
_ENV = re.compile(r"[^A-Z0-9_]")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASS|AUTH|CREDENTIAL|PRIVATE|COOKIE|SESSION", re.IGNORECASE)
MAX_SERVERS = 20


@dataclass
class Servers:
    """`servers`: name -> entry; `secrets`: the values the entries refer to."""

    servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)

    def _secret(self, server: str, what: str, value: str) -> str:
        if len(value) < MIN_LENGTH or not _SECRET.search(what):
            return value
        name = _ENV.sub("_", f"MCP_{server}_{what}".upper())[:120]
        if name[0].isdigit():
            name = "_" + name
        base, n = name, 1
        while name in self.secrets and self.secrets[name] != value:
            n += 1
            name = f"{base}_{n}"
        self.secrets[name] = value
        return "${" + name + "}"

    def _name(self, raw: str) -> str:
        name = _NAME.sub("_", raw)[:60] or "mcp"
        base, n = name, 1
        while name in self.servers:
            n += 1
            name = f"{base}_{n}"
        return name


def convert(servers: list[Any] | None) -> Servers:
    """The servers the service can run: stdio ones and streamable-HTTP ones (SSE and ACP
    servers are left out with a log line: the sandbox has no way to reach them)."""
    out = Servers()
    for server in (servers or [])[:MAX_SERVERS]:
        if isinstance(server, McpServerStdio):
            name = out._name(server.name)
            out.servers[name] = {
                "command": server.command,
                "args": list(server.args),
                "env": {v.name: out._secret(name, v.name, v.value) for v in server.env},
            }
        elif isinstance(server, HttpMcpServer):
            name = out._name(server.name)
            out.servers[name] = {
                "url": server.url,
                "headers": {
                    h.name: out._secret(name, f"HEADER_{h.name}", h.value) for h in server.headers
                },
            }
        else:
            logger.warning(
                "MCP server %r left out: only stdio and HTTP servers are passed on",
                getattr(server, "name", "?"),
            )
    return out


__all__ = ["Servers", "convert"]
