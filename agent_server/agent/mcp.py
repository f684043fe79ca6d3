"""A conversation's MCP tool servers: start, call, stop (SPEC 2.5, 5 rule 4).

Their configuration (`agent.mcp_config`: its shape, placeholders and masking) is
agent.mcp_config's; a server's entry becomes a ServerSpec, placeholders filled, just before
its connection opens.

Each server is held open by a task of its own. The `mcp` client is a nest of anyio task
groups, and a transport that fails cancels the task that entered it: that task must be ours,
never a run or a request. Every wait is bounded; a server that fails to start or dies is
reported (ServerErrorEvent) and its tools answer with error observations until the next run
starts it again.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from enum import Enum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from agent_server.agent.mcp_config import CALL_TIMEOUT, SSE, STDIO, ServerSpec, servers_of, spec
from events import ServerErrorEvent
from events.tools.mcp import MCPToolObservation
from tools.base import ToolContext
from tools.mcp import MCPTool, failure, observation
from web.errors import UpstreamError

if TYPE_CHECKING:
    from mcp import Client

logger = logging.getLogger(__name__)

TOOL_NAME_MAX = 64
#: Bound on stopping one server (the stdio client itself escalates to SIGKILL within ~6 s).
STOP_TIMEOUT = 8.0
MAX_TOOLS_PER_SERVER = 200
MAX_DESCRIPTION = 4_000
#: Characters of a failed server's stderr quoted in its ServerErrorEvent.
STDERR_TAIL = 1_500


class ServerState(str, Enum):
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    #: Failed to start, or died; the next start() tries again.
    FAILED = "failed"
    STOPPED = "stopped"


class MCPServerError(UpstreamError):
    """A server could not be started or reached; `code` becomes a ServerErrorEvent's code."""


def tool_name(server: str, tool: str, taken: set[str]) -> str:
    """`<server>_<tool>` in what every provider accepts ([A-Za-z0-9_-], at most 64), unique."""
    base = re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}_{tool}")[:TOOL_NAME_MAX]
    name, n = base, 2
    while name in taken:
        suffix = f"_{n}"
        name, n = base[: TOOL_NAME_MAX - len(suffix)] + suffix, n + 1
    taken.add(name)
    return name


def _describe(exc: BaseException) -> str:
    """The innermost real error of an (exception-group wrapped) failure."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- one server ---------------------------------------------------------------------------


class ServerConnection:
    """One MCP server: a task holds the client open between start() and stop()."""

    def __init__(self, name: str, entry: Any, working_dir: Path, log_dir: Path) -> None:
        self.name, self.entry = name, entry
        self.working_dir, self.log_dir = working_dir, log_dir
        self.state = ServerState.NEW
        self.error: str | None = None
        self.tools: list[Any] = []  # mcp_types.Tool, as last listed
        self.call_timeout = CALL_TIMEOUT
        self.transport = ""
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._stderr: IO[str] | None = None
        #: Called once when a running server is found dead (the manager reports it).
        self.on_death: Callable[[ServerConnection, str], None] | None = None

    @property
    def stderr_path(self) -> Path:
        return self.log_dir / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', self.name)}.stderr.log"

    async def start(self, secrets: Mapping[str, str]) -> None:
        """Connect and list the tools, within the startup timeout; raises MCPServerError."""
        await self.stop()  # what is left of an earlier connection ends before a new one
        try:
            server = spec(self.name, self.entry, secrets)
        except (KeyError, ValueError) as exc:
            problem = (
                f"no secret named {exc.args[0]!r} fills its placeholder"
                if isinstance(exc, KeyError)
                else str(exc)
            )
            self._fail(problem)
            raise MCPServerError("MCPConfigError", f"MCP server {self.name!r}: {problem}") from None
        self.call_timeout, self.transport = server.call_timeout, server.transport
        self.state, self.error = ServerState.STARTING, None
        self._stop = stop = asyncio.Event()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(server, ready, stop), name=f"mcp {self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), server.startup_timeout)
        except TimeoutError:
            ready.cancel()
            await self.stop()
            self._fail(f"no answer within {server.startup_timeout:g} s")
            raise MCPServerError(
                "MCPServerStartTimeout",
                f"MCP server {self.name!r} did not start: {self.error}" + self._stderr_tail(),
            ) from None
        except MCPServerError as exc:
            exc.detail += self._stderr_tail()
            raise

    async def _hold(
        self, server: ServerSpec, ready: asyncio.Future[None], stop: asyncio.Event
    ) -> None:
        error = "the connection closed"
        try:
            async with AsyncExitStack() as stack:
                client = await self._connect(server, stack)
                tools = await _list_tools(client)
                self._client, self.tools = client, tools
                self.state = ServerState.RUNNING
                ready.set_result(None)
                await stop.wait()
        except BaseException as exc:
            # Whatever ended the connection (a transport's ExceptionGroup, a spawn's OSError)
            # is what the ServerErrorEvent says.
            error = _describe(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._client = None
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None
            if not ready.done():
                self._fail(error)
                ready.set_exception(
                    MCPServerError(
                        "MCPServerStartFailed", f"MCP server {self.name!r} failed to start: {error}"
                    )
                )
            elif not stop.is_set():
                self._died(error)

    async def _connect(self, server: ServerSpec, stack: AsyncExitStack) -> Client:
        from mcp import Client, StdioServerParameters
        from mcp.client.sse import sse_client
        from mcp.client.stdio import stdio_client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client
        from mcp_types import Implementation

        transport: Any
        if server.transport == STDIO:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self._stderr = open(self.stderr_path, "w", encoding="utf-8", errors="replace")
            cwd = Path(server.cwd) if server.cwd else self.working_dir
            if not cwd.is_absolute():
                cwd = self.working_dir / cwd
            params = StdioServerParameters(
                command=server.command, args=list(server.args), env=dict(server.env), cwd=cwd
            )
            transport = stdio_client(params, errlog=self._stderr)
        elif server.transport == SSE:
            transport = sse_client(server.url, headers=dict(server.headers))
        else:
            http = await stack.enter_async_context(
                create_mcp_http_client(headers=dict(server.headers))
            )
            transport = streamable_http_client(server.url, http_client=http)
        client = Client(
            transport, cache=None, client_info=Implementation(name="agent-server", version="0.1.0")
        )
        return await stack.enter_async_context(client)

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """The CallToolResult of one call; raises MCPServerError when no result can come."""
        client = self._client
        if self.state != ServerState.RUNNING or client is None:
            raise MCPServerError(
                "MCPServerNotRunning",
                f"The MCP server {self.name!r} is not "
                f"running ({self.error or self.state.value}); it is started "
                "again when the next run begins.",
            )
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        try:
            return await asyncio.wait_for(client.call_tool(tool, arguments), self.call_timeout)
        except TimeoutError:
            raise MCPServerError(
                "MCPToolTimeout", f"No result from {self.name!r} within {self.call_timeout:g} s."
            ) from None
        except Exception as exc:
            closed = isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED
            if not closed and self._alive():  # a bad result, a refused call: the server is up
                raise MCPServerError("MCPToolCallFailed", _describe(exc)) from None
            self._died(_describe(exc))
            raise MCPServerError(
                "MCPServerDied",
                f"The MCP server {self.name!r} stopped during the call: {self.error}.",
            ) from None

    def _alive(self) -> bool:
        task = self._task
        return self.state == ServerState.RUNNING and task is not None and not task.done()

    async def stop(self) -> None:
        """Close the connection (and the server process), within STOP_TIMEOUT."""
        task, self._task = self._task, None
        graceful = self.state == ServerState.RUNNING
        self._stop.set()
        if self.state in (ServerState.RUNNING, ServerState.STARTING):
            self.state = ServerState.STOPPED
        if task is None or task.done():
            return
        if graceful:  # the holding task closes the session and the process itself
            done, _ = await asyncio.wait({task}, timeout=STOP_TIMEOUT)
            if done:
                return
        task.cancel()  # the stdio client still ends its process, within bounds of its own
        await asyncio.wait({task}, timeout=STOP_TIMEOUT)

    def _fail(self, error: str) -> None:
        self.state, self.error = ServerState.FAILED, error

    def _died(self, error: str) -> None:
        if self.state != ServerState.RUNNING:
            return
        self._fail(error)
        self._stop.set()  # lets the holding task close what is left of the connection
        if self.on_death is not None:
            self.on_death(self, error)

    def _stderr_tail(self) -> str:
        if self.transport != STDIO:
            return ""
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - STDERR_TAIL))
                tail = f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f"\nstderr:\n{tail}" if tail else ""


async def _list_tools(client: Client) -> list[Any]:
    tools: list[Any] = []
    cursor: str | None = None
    for _ in range(20):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None or len(tools) >= MAX_TOOLS_PER_SERVER:
            break
    return tools[:MAX_TOOLS_PER_SERVER]


# -- the conversation's servers -----------------------------------------------------------


Report = Callable[[ServerErrorEvent], Awaitable[Any]]


class MCPServers:
    """The MCP servers of one conversation, and the agent tools they offer."""

    def __init__(self, config: Mapping[str, Any] | None, ctx: ToolContext, report: Report) -> None:
        self.ctx = ctx
        self.report = report
        self.servers = [
            ServerConnection(name, entry, ctx.working_dir, ctx.state_dir / "mcp")
            for name, entry in servers_of(config).items()
        ]
        for server in self.servers:
            server.on_death = self._on_death
        self._lock = asyncio.Lock()
        self._reports: set[asyncio.Task[Any]] = set()

    def __bool__(self) -> bool:
        return bool(self.servers)

    async def start(self) -> list[ServerErrorEvent]:
        """Start every server not running; the failures, as events for the caller to append."""
        async with self._lock:
            pending = [s for s in self.servers if s.state != ServerState.RUNNING]
            results = await asyncio.gather(
                *(s.start(self.ctx.secrets) for s in pending), return_exceptions=True
            )
        errors = []
        for server, result in zip(pending, results):
            if isinstance(result, MCPServerError):
                errors.append(
                    ServerErrorEvent(source="environment", code=result.code, detail=result.detail)
                )
            elif isinstance(result, BaseException):
                logger.error("starting MCP server %s failed", server.name, exc_info=result)
                errors.append(
                    ServerErrorEvent(
                        source="environment",
                        code="MCPServerStartFailed",
                        detail=f"MCP server {server.name!r} failed to start: {_describe(result)}",
                    )
                )
        return errors

    def tools(self, taken: set[str]) -> list[MCPTool]:
        """One agent tool per tool of each server that has listed its tools."""
        out = []
        for server in self.servers:
            for remote in server.tools:
                name = tool_name(server.name, remote.name, taken)
                annotations = remote.annotations
                read_only = bool(annotations is not None and annotations.read_only_hint)
                description = (remote.description or remote.title or remote.name)[:MAX_DESCRIPTION]
                out.append(
                    MCPTool(
                        self.ctx,
                        name=name,
                        description=description,
                        schema=remote.input_schema or {},
                        server=server.name,
                        remote_name=remote.name,
                        read_only=read_only,
                        call=self._caller(server, remote.name, name),
                    )
                )
        return out

    def _caller(
        self, server: ServerConnection, remote: str, name: str
    ) -> Callable[[dict[str, Any]], Awaitable[MCPToolObservation]]:
        async def call(arguments: dict[str, Any]) -> MCPToolObservation:
            try:
                result = await server.call(remote, arguments)
            except MCPServerError as exc:
                await self._drain_reports()
                return failure(name, exc.detail)
            return observation(name, result)

        return call

    def _on_death(self, server: ServerConnection, error: str) -> None:
        event = ServerErrorEvent(
            source="environment",
            code="MCPServerDied",
            detail=f"MCP server {server.name!r} stopped: {error}",
        )
        task = asyncio.ensure_future(self.report(event))
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    async def _drain_reports(self) -> None:
        """The ServerErrorEvent of a death goes into the log before the call's observation."""
        if self._reports:
            await asyncio.wait(set(self._reports), timeout=5)

    async def close(self) -> None:
        await asyncio.gather(*(s.stop() for s in self.servers), return_exceptions=True)
        await self._drain_reports()


__all__ = [
    "MCPServerError",
    "MCPServers",
    "ServerConnection",
    "ServerState",
    "tool_name",
]
