"""ACP terminals: commands an ACP agent asks its client to run (`terminal/*`).

Each runs in the workspace in a session of its own with the agent's own environment (never
the server's keys), keeps only the newest output up to a byte limit (the protocol cuts from
the beginning), and is killed with all it started when released, or when the conversation
ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from acp import RequestError
from acp.schema import EnvVariable, TerminalExitStatus

from core.paths import OutsideRoot, confine
from core.processes import CHUNK, TAG_VARIABLE, end_group, exited, oom_first, start_process

#: Terminals one conversation may hold at once.
MAX_TERMINALS = 16
#: The most output kept of one terminal (the newest bytes), whatever the agent asks for.
MAX_OUTPUT_BYTES = 1024 * 1024


@dataclass
class Terminal:
    proc: asyncio.subprocess.Process
    tag: str
    limit: int
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    reader: asyncio.Task[None] | None = None

    def text(self) -> str:
        data = bytes(self.output)
        if self.truncated:  # cut at a character boundary: no half a character in front
            while data and data[0] & 0xC0 == 0x80:
                data = data[1:]
        return data.decode("utf-8", errors="replace")

    def exit_status(self) -> TerminalExitStatus | None:
        code = self.proc.returncode
        if code is None:
            return None
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            return TerminalExitStatus(exit_code=None, signal=name)
        return TerminalExitStatus(exit_code=code, signal=None)

    async def collect(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(CHUNK):
            self.output += chunk
            if len(self.output) > self.limit:
                del self.output[: len(self.output) - self.limit]
                self.truncated = True


class Terminals:
    """The terminals of one conversation's agent."""

    def __init__(self, root: Path, env: Callable[[], Mapping[str, str]]) -> None:
        self.root = root
        self._env = env
        self._items: dict[str, Terminal] = {}

    async def create(
        self,
        command: str,
        args: list[str] | None,
        env: list[EnvVariable] | None,
        cwd: str | None,
        output_byte_limit: int | None,
    ) -> str:
        """Start a command (`args` given: the program and its arguments; none: a shell
        command line). Raises RequestError when it cannot start."""
        if len(self._items) >= MAX_TERMINALS:
            raise RequestError.invalid_request(
                {"details": f"at most {MAX_TERMINALS} terminals at once: release one first"}
            )
        try:
            where = confine(self.root, cwd) if cwd else self.root
        except OutsideRoot as exc:
            raise RequestError.invalid_params({"details": str(exc)}) from None
        argv = [command, *args] if args else ["/bin/sh", "-c", command]
        tag = secrets.token_hex(8)
        extra = {v.name: v.value for v in env or ()}
        try:
            variables = {**self._env(), **extra, TAG_VARIABLE: tag}
            proc = await start_process(
                *oom_first(argv, where, variables),
                cwd=where,
                env=variables,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise RequestError.invalid_params(
                {"details": f"cannot start {command}: {exc.strerror or exc}"}
            ) from None
        limit = min(output_byte_limit or MAX_OUTPUT_BYTES, MAX_OUTPUT_BYTES)
        terminal = Terminal(proc, tag, limit)
        assert proc.stdout is not None
        terminal.reader = asyncio.create_task(
            terminal.collect(proc.stdout), name=f"acp terminal {proc.pid}"
        )
        terminal_id = f"term-{secrets.token_hex(6)}"
        self._items[terminal_id] = terminal
        return terminal_id

    def get(self, terminal_id: str) -> Terminal:
        terminal = self._items.get(terminal_id)
        if terminal is None:
            raise RequestError.invalid_params({"details": f"no terminal {terminal_id}"})
        return terminal

    async def wait(self, terminal_id: str) -> Terminal:
        terminal = self.get(terminal_id)
        await exited(terminal.proc)  # not its pipes: a background child may hold them
        if terminal.reader is not None:  # its last output is in before the exit is told
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(terminal.reader), 2)
        return terminal

    async def kill(self, terminal_id: str) -> None:
        terminal = self.get(terminal_id)
        if terminal.proc.returncode is None:
            await end_group(terminal.proc, terminal.tag)

    async def release(self, terminal_id: str) -> None:
        terminal = self._items.pop(terminal_id, None)
        if terminal is not None:
            await _end(terminal)

    async def close(self) -> None:
        items, self._items = list(self._items.values()), {}
        await asyncio.gather(*(_end(t) for t in items), return_exceptions=True)


async def _end(terminal: Terminal) -> None:
    await end_group(terminal.proc, terminal.tag)
    if terminal.reader is not None:
        terminal.reader.cancel()
        await asyncio.gather(terminal.reader, return_exceptions=True)
