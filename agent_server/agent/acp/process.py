"""The ACP agent's process: started in the workspace in a session of its own, spoken to over
its stdin and stdout, its stderr kept as a short tail, and stopped with all it started; and
the protocol session opened over it (`AgentConnection`: initialize, then session/load of the
conversation's earlier session when the agent offers it, else session/new).

Only whole JSON lines of at most MAX_LINE_BYTES reach the protocol connection: some agents
log to stdout, and an endless line must not grow our memory without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import signal
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import acp
from acp import PROTOCOL_VERSION, RequestError
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
)

from agent_server import __version__
from agent_server.agent.acp.client import WorkspaceClient
from agent_server.agent.spec import ACPAgentSpec
from core.ids import ENV_NAME, PLACEHOLDER
from core.processes import (
    CHUNK,
    TAG_VARIABLE,
    child_env,
    end_group,
    exited,
    oom_first,
    start_process,
)

logger = logging.getLogger(__name__)

#: A protocol message longer than this is dropped (and logged), never buffered whole.
MAX_LINE_BYTES = 8 * 1024 * 1024
#: The last lines of stderr kept for a crash report, each cut to STDERR_LINE_CHARS.
STDERR_LINES = 20
STDERR_LINE_CHARS = 500
#: Seconds to wait for a crashed process's exit status.
EXIT_WAIT = 5.0
#: What talking to an agent that is gone raises: the pipes' errors, the protocol's closed
#: connection, and uvloop's RuntimeError for a write on the pipe it closed at the exit.
GONE = (ConnectionError, OSError, RuntimeError)


class ACPFailure(Exception):
    """Ends a run in ERROR with a ConversationErrorEvent of this code and detail."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code, self.detail = code, detail


def agent_env(
    agent: ACPAgentSpec, secrets: Mapping[str, str], git_author: Mapping[str, str]
) -> dict[str, str]:
    """The agent's environment: the server's without its keys, the commit author, the
    conversation's secrets by name, then acp_env with `${NAME}` filled from them."""
    named = {k: v for k, v in secrets.items() if ENV_NAME.fullmatch(k)}
    own = {
        k: PLACEHOLDER.sub(lambda m: secrets.get(m.group(1), ""), v)
        for k, v in agent.acp_env.items()
    }
    return child_env(git_author, named, own)


def request_error(exc: RequestError) -> str:
    data = f" {exc.data}" if exc.data is not None else ""
    return f"The ACP agent answered an error {exc.code}: {exc}{data}"[:4000]


class AgentProcess:
    """A running agent: `reader` yields its protocol lines, `writer` is its stdin."""

    def __init__(
        self, proc: asyncio.subprocess.Process, tag: str, mask: Callable[[str], str]
    ) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.tag = tag
        self.writer = proc.stdin
        self.reader = asyncio.StreamReader()
        self._mask = mask
        self._stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._pumps = [
            asyncio.create_task(self._pump_stdout(proc.stdout), name=f"acp stdout {proc.pid}"),
            asyncio.create_task(self._pump_stderr(proc.stderr), name=f"acp stderr {proc.pid}"),
        ]

    @classmethod
    async def start(
        cls, argv: Sequence[str], cwd: Path, env: Mapping[str, str], mask: Callable[[str], str]
    ) -> AgentProcess:
        """Raises OSError when the program cannot be started."""
        tag = secrets.token_hex(8)
        proc = await start_process(
            *oom_first(argv, cwd, env),
            cwd=cwd,
            env={**env, TAG_VARIABLE: tag},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        return cls(proc, tag, mask)

    async def crashed(self, program: str, when: str) -> ACPFailure:
        """What to report of a process gone (or whose pipes are): its exit status and its
        last stderr lines."""
        await self.exited(EXIT_WAIT)
        return ACPFailure(
            "ACPAgentExited",
            f"The ACP agent ({program}) stopped {when}: {self.exit_text()}."
            f"\nLast stderr lines:\n{self.stderr_tail()}",
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def exited(self, timeout: float) -> int | None:
        """The exit status once the process has ended (None if it is still running then)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(exited(self.proc)), timeout)
        return self.proc.returncode

    def exit_text(self) -> str:
        code = self.proc.returncode
        if code is None:
            return "still running"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
            return f"killed by signal {-code}"
        return f"exit status {code}"

    def stderr_tail(self) -> str:
        """The last lines it wrote to stderr, secrets masked."""
        return self._mask("\n".join(self._stderr))

    async def stop(self) -> None:
        """End its process group and whatever it started elsewhere (core.processes)."""
        with contextlib.suppress(Exception):
            self.writer.close()
        await end_group(self.proc, self.tag)
        for pump in self._pumps:  # the pipes are closed now; what is left is dropped
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    # -- pipes -----------------------------------------------------------------------------

    async def _pump_stdout(self, stdout: asyncio.StreamReader) -> None:
        try:
            async for line in _lines(stdout, MAX_LINE_BYTES):
                if line is None:
                    logger.warning(
                        "ACP agent %s wrote a line over %d bytes: dropped", self.pid, MAX_LINE_BYTES
                    )
                elif line.lstrip().startswith(b"{"):
                    self.reader.feed_data(line + b"\n")
                elif line.strip():
                    logger.info(
                        "ACP agent %s stdout (not protocol): %s",
                        self.pid,
                        self._mask(line[:STDERR_LINE_CHARS].decode(errors="replace")),
                    )
        finally:
            self.reader.feed_eof()

    async def _pump_stderr(self, stderr: asyncio.StreamReader) -> None:
        async for line in _lines(stderr, STDERR_LINE_CHARS * 4):
            text = "[line cut]" if line is None else line.decode(errors="replace")
            self._stderr.append(text.rstrip()[:STDERR_LINE_CHARS])


@dataclass
class Opened:
    """The session a handshake opened: `resumed` when it is the earlier one (session/load);
    otherwise `lost` says why the earlier one (if any) could not be resumed."""

    session_id: str
    capabilities: AgentCapabilities
    resumed: bool = False
    lost: str | None = None


class AgentConnection:
    """The agent's process with the protocol session opened over it (`open`)."""

    def __init__(
        self, program: str, proc: AgentProcess, conn: ClientSideConnection, opened: Opened
    ) -> None:
        self.program, self.proc, self.conn, self.opened = program, proc, conn, opened
        self.session_id = opened.session_id

    @classmethod
    async def open(
        cls,
        agent: ACPAgentSpec,
        cwd: Path,
        env: Mapping[str, str],
        client: WorkspaceClient,
        mask: Callable[[str], str],
        resume: str | None = None,
    ) -> AgentConnection:
        """Start the agent and open its session (within acp_startup_timeout): `resume`, the
        id of an earlier session, is loaded when the agent can. Raises ACPFailure, leaving
        no process behind, when that fails."""
        argv = [*agent.acp_command, *agent.acp_args]
        try:
            proc = await AgentProcess.start(argv, cwd, env, mask)
        except OSError as exc:
            raise ACPFailure(
                "ACPStartFailed", f"Cannot start {argv[0]}: {exc.strerror or exc}."
            ) from None
        conn = acp.connect_to_agent(client, proc.writer, proc.reader)
        try:
            opened = await asyncio.wait_for(
                _handshake(conn, proc, argv[0], cwd, resume), agent.acp_startup_timeout
            )
        except BaseException as exc:
            await _close(conn)
            await proc.stop()
            if isinstance(exc, TimeoutError):
                raise ACPFailure(
                    "ACPStartTimeout",
                    "The ACP agent did not answer initialize "
                    "and session/new (or session/load) within "
                    f"{agent.acp_startup_timeout:g} s.",
                ) from None
            raise
        return cls(argv[0], proc, conn, opened)

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    async def crashed(self, when: str) -> ACPFailure:
        return await self.proc.crashed(self.program, when)

    async def hang_up(self) -> None:
        """Close the protocol connection (a request in flight fails)."""
        await _close(self.conn)

    async def stop(self) -> None:
        await self.proc.stop()


async def _handshake(
    conn: ClientSideConnection, proc: AgentProcess, program: str, cwd: Path, resume: str | None
) -> Opened:
    """initialize, then session/load of `resume` when the agent offers it (loadSession),
    else (or when the load is refused) session/new."""
    capabilities = ClientCapabilities(
        fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
    )
    try:
        hello = await conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=capabilities,
            client_info=Implementation(name="agent-server", version=__version__),
        )
        if hello.protocol_version != PROTOCOL_VERSION:
            raise ACPFailure(
                "ACPStartFailed",
                f"The ACP agent speaks protocol version {hello.protocol_version}"
                f"; this server speaks {PROTOCOL_VERSION}.",
            )
        offered = hello.agent_capabilities or AgentCapabilities()
        lost = None
        if resume is not None and not offered.load_session:
            lost = "the agent does not offer session/load (no loadSession capability)"
        elif resume is not None:
            try:
                await conn.load_session(cwd=str(cwd), session_id=resume, mcp_servers=[])
                return Opened(resume, offered, resumed=True)
            except RequestError as exc:  # it forgot the session: a new one still works
                lost = f"session/load failed: {request_error(exc)}"
        session = await conn.new_session(cwd=str(cwd), mcp_servers=[])
    except RequestError as exc:
        raise ACPFailure("ACPStartFailed", request_error(exc)) from None
    except GONE:
        raise await proc.crashed(program, "while starting") from None
    return Opened(session.session_id, offered, lost=lost)


async def _close(conn: ClientSideConnection) -> None:
    with contextlib.suppress(Exception):
        await conn.close()


async def _lines(stream: asyncio.StreamReader, limit: int) -> AsyncIterator[bytes | None]:
    """The lines of a stream without their newline; None for a line over `limit` bytes
    (its bytes are skipped as they come, never held)."""
    buffer = bytearray()
    skipping = False
    while chunk := await stream.read(CHUNK):
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            if skipping:
                skipping = False
                yield None
            else:
                buffer += chunk[start:end]
                if len(buffer) > limit:
                    yield None
                else:
                    yield bytes(buffer)
            buffer.clear()
            start = end + 1
        if not skipping:
            buffer += chunk[start:]
            if len(buffer) > limit:
                buffer.clear()
                skipping = True
    if buffer and not skipping:
        yield bytes(buffer)
    elif skipping:
        yield None
