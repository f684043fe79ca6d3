"""MCP tool servers for the tests, written with the `mcp` package.

    python -m tests.support.mcp_servers stdio                 # over stdin/stdout
    python -m tests.support.mcp_servers http --port 8123      # streamable HTTP at /mcp

Both serve the same tools: `echo`, `add`, `env` (the value of an environment variable),
`header` (a request header, HTTP only), `image` (a one-pixel PNG), `fail` (an error result),
`sleep` and `crash` (the process exits mid-call, as a dying server does).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from mcp.server.mcpserver import Context, Image, MCPServer

from tests.support.llm import free_port

ROOT = Path(__file__).resolve().parents[2]

#: The smallest valid PNG (1x1, transparent).
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
)


def build() -> MCPServer:
    server = MCPServer("test-tools")

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(description="The value of an environment variable of the server.")
    def env(var: str) -> str:
        return os.environ.get(var, "<unset>")

    @server.tool(description="A header of the HTTP request that carried this call.")
    def header(key: str, ctx: Context) -> str:
        return (ctx.headers or {}).get(key.lower(), "<unset>")

    @server.tool(description="A tiny image.")
    def image() -> Image:
        return Image(data=PIXEL, format="png")

    @server.tool(description="Always fails.")
    def fail(reason: str) -> str:
        raise ValueError(f"failed on purpose: {reason}")

    @server.tool(description="Sleep, then answer.")
    async def sleep(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "slept"

    @server.tool(description="Exit the server process at once, mid-call.")
    def crash() -> str:
        os._exit(3)

    return server


#: A stdio server of the `env` tool alone, needing nothing but the installed `mcp` package: for
#: an isolated sandbox, where the tests' own files are out of sight.
ENV_SERVER = """
import os
from mcp.server.mcpserver import MCPServer
server = MCPServer("test-env")
@server.tool(description="The value of an environment variable of the server.")
def env(var: str) -> str:
    return os.environ.get(var, "<unset>")
server.run("stdio")
"""


def env_server_config(**env: str) -> dict[str, Any]:
    """An mcpServers entry that runs ENV_SERVER with `env`."""
    return {"command": sys.executable, "args": ["-c", ENV_SERVER], "env": env}


def stdio_config(**env: str) -> dict[str, Any]:
    """An mcpServers entry that runs the stdio server (from any working directory)."""
    return {
        "command": sys.executable,
        "args": ["-m", "tests.support.mcp_servers", "stdio"],
        "env": {"PYTHONPATH": str(ROOT), **env},
    }


class HTTPServer:
    """The streamable-HTTP server in a subprocess on a loopback port (kill() crashes it)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self, timeout: float = 20) -> HTTPServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.mcp_servers", "http", "--port", str(self.port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"MCP HTTP server exited with {self.proc.returncode}")
            try:
                httpx.get(self.url, timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"MCP HTTP server not up after {timeout}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if os.environ.get("MCP_PID_FILE"):  # lets a test see that the process went away
        Path(os.environ["MCP_PID_FILE"]).write_text(str(os.getpid()))
    server = build()
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
