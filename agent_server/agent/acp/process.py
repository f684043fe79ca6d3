"""The ACP agent's process: started in the workspace in a session of its own, spoken to over
its stdin and stdout, its stderr kept as a short tail, and stopped with all it started.

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
from pathlib import Path

from core.processes import CHUNK, TAG_VARIABLE, end_group

logger = logging.getLogger(__name__)

#: A protocol message longer than this is dropped (and logged), never buffered whole.
MAX_LINE_BYTES = 8 * 1024 * 1024
#: The last lines of stderr kept for a crash report, each cut to STDERR_LINE_CHARS.
STDERR_LINES = 20
STDERR_LINE_CHARS = 500


class AgentProcess:
    """A running agent: `reader` yields its protocol lines, `writer` is its stdin."""

    def __init__(self, proc: asyncio.subprocess.Process, tag: str,
                 mask: Callable[[str], str]) -> None:
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
    async def start(cls, argv: Sequence[str], cwd: Path, env: Mapping[str, str],
                    mask: Callable[[str], str]) -> AgentProcess:
        """Raises OSError when the program cannot be started."""
        tag = secrets.token_hex(8)
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env={**env, TAG_VARIABLE: tag},
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )
        return cls(proc, tag, mask)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def exited(self, timeout: float) -> int | None:
        """The exit status once the process has ended (None if it is still running then)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), timeout)
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
                    logger.warning("ACP agent %s wrote a line over %d bytes: dropped", self.pid,
                                   MAX_LINE_BYTES)
                elif line.lstrip().startswith(b"{"):
                    self.reader.feed_data(line + b"\n")
                elif line.strip():
                    logger.info("ACP agent %s stdout (not protocol): %s", self.pid,
                                self._mask(line[:STDERR_LINE_CHARS].decode(errors="replace")))
        finally:
            self.reader.feed_eof()

    async def _pump_stderr(self, stderr: asyncio.StreamReader) -> None:
        async for line in _lines(stderr, STDERR_LINE_CHARS * 4):
            text = "[line cut]" if line is None else line.decode(errors="replace")
            self._stderr.append(text.rstrip()[:STDERR_LINE_CHARS])


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

