"""Shell commands run in a workspace outside the agent's terminal: at once, or in the
background with their output kept for polling (the OpenHands bash routes).

A background command is a BashCommand; its output comes as BashOutput pieces while it runs
(orders 0, 1, ...: what it wrote since the last piece, every PIECE_SECONDS at most, MAX_PIECES
of them at most), and a last one with its exit code and the rest, as the OpenHands server
streams them: a client joins the pieces' stdout (and stderr) in order. Each stream is masked as
it comes (a secret split between two reads is held back until it can be masked whole) and
capped at MAX_OUTPUT_BYTES characters in all, with a note of what was left out. Clients poll
`search` (`order__gt` the last order seen) for them. Commands
are kept per scope (the host, or one conversation): the last MAX_KEPT of each, finished ones
forgotten first; when all of them are still running, a new one is refused (409) until one
ends (each ends by its timeout), so neither the list nor the processes grow without bound.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field

from agent_server.workspace import Scope, masked_keep, output_text
from core.masking import Masker
from core.processes import MAX_OUTPUT_BYTES, child_env, run_process
from events import format_timestamp
from web.errors import Conflict

logger = logging.getLogger(__name__)

#: Commands kept per scope.
MAX_KEPT = 200
#: How often a running command's new output becomes a piece, at most (seconds).
PIECE_SECONDS = 0.2
#: Pieces a command reports before its end; past them, the rest comes with the end.
MAX_PIECES = 100


def _now() -> str:
    return format_timestamp(datetime.now(UTC))


class BashCommand(BaseModel):
    kind: Literal["BashCommand"] = "BashCommand"
    id: str = Field(default_factory=lambda: str(uuid.uuid4()))
    timestamp: str = Field(default_factory=_now)
    command: str
    cwd: str | None = None
    timeout: float


class BashOutput(BaseModel):
    """A piece of a command's output (exit_code null: more is coming), or its end (exit_code
    set, with the output not yet reported)."""

    kind: Literal["BashOutput"] = "BashOutput"
    id: str = Field(default_factory=lambda: str(uuid.uuid4()))
    timestamp: str = Field(default_factory=_now)
    command_id: str
    order: int = 0
    exit_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None
    timed_out: bool = False


class _Stream:
    """One output stream of a running command: decoded, masked and capped as it comes."""

    def __init__(self, masker: Masker, limit: int = MAX_OUTPUT_BYTES) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._masker = masker.stream()
        self._pending: list[str] = []
        self._limit = limit
        self._shown = 0
        self._total = 0
        self._cut = False

    def feed(self, data: bytes) -> None:
        self._total += len(data)
        self._add(self._masker.feed(self._decoder.decode(data)))

    def take(self) -> str | None:
        """What came since the last take (None: nothing)."""
        text, self._pending = "".join(self._pending), []
        return text or None

    def end(self) -> str | None:
        """The rest, with a note when the cap left some out."""
        self._add(self._masker.feed(self._decoder.decode(b"", final=True)))
        self._add(self._masker.flush())
        if self._cut:
            self._pending.append(
                f"\n[output truncated: {self._total} bytes in all, the first "
                f"{self._limit} characters shown]"
            )
        return self.take()

    def _add(self, text: str) -> None:
        room = self._limit - self._shown
        if len(text) > room:
            text, self._cut = text[:room], True
        if text:
            self._shown += len(text)
            self._pending.append(text)


@dataclass
class _Kept:
    command: BashCommand
    outputs: list[BashOutput] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    def report(
        self,
        stdout: str | None,
        stderr: str | None,
        exit_code: int | None = None,
        timed_out: bool = False,
    ) -> None:
        self.outputs.append(
            BashOutput(
                command_id=self.command.id,
                order=len(self.outputs),
                exit_code=exit_code,
                stdout=stdout,
                stderr=stderr,
                timed_out=timed_out,
            )
        )


@dataclass
class _Scoped:
    commands: dict[str, _Kept] = field(default_factory=dict)  # in start order


class Commands:
    """Background commands by scope key."""

    def __init__(self) -> None:
        self._scopes: dict[str, _Scoped] = {}

    async def run(
        self,
        scope: Scope,
        command: str,
        cwd: str | None,
        timeout: float,
        env: Mapping[str, str] | None = None,
        git: Mapping[str, str] | None = None,
        command_id: str = "",
    ) -> BashOutput:
        """Run to its end (or timeout: the process group is killed) and return its result,
        secrets in its environment and masked in its output."""
        where = await scope.directory(cwd, "cwd")
        done = await run_process(
            ["bash", "-c", command],
            where,
            child_env(git or {}, scope.secrets, env or {}),
            timeout,
            keep=masked_keep(scope.secrets),
        )
        return BashOutput(
            command_id=command_id or str(uuid.uuid4()),
            exit_code=done.exit_code,
            timed_out=done.timed_out,
            stdout=output_text(done.stdout, MAX_OUTPUT_BYTES, scope.masker),
            stderr=output_text(done.stderr, MAX_OUTPUT_BYTES, scope.masker),
        )

    async def start(
        self,
        scope: Scope,
        command: str,
        cwd: str | None,
        timeout: float,
        git: Mapping[str, str] | None = None,
    ) -> BashCommand:
        """Start in the background; its BashOutput pieces appear in `search` as it writes,
        the last one (with its exit code) when it ends. Conflict (409) while MAX_KEPT
        commands of the scope are all still running."""
        where = await scope.directory(cwd, "cwd")  # a bad cwd is the caller's error now
        scoped = self._scopes.setdefault(scope.key, _Scoped())
        self._forget_old(scoped)
        kept = _Kept(BashCommand(command=command, cwd=cwd, timeout=timeout))
        scoped.commands[kept.command.id] = kept
        streams = (_Stream(scope.masker), _Stream(scope.masker))

        async def pieces() -> None:
            while len(kept.outputs) < MAX_PIECES:
                await asyncio.sleep(PIECE_SECONDS)
                stdout, stderr = streams[0].take(), streams[1].take()
                if stdout is not None or stderr is not None:
                    kept.report(stdout, stderr)

        async def background() -> None:
            cutter = asyncio.create_task(pieces())
            try:
                done = await run_process(
                    ["bash", "-c", command],
                    where,
                    child_env(git or {}, scope.secrets),
                    timeout,
                    keep=0,
                    on_output=lambda index, data: streams[index].feed(data),
                )
            except asyncio.CancelledError:
                kept.report(streams[0].end(), (streams[1].end() or "") + "Stopped.", exit_code=-15)
                raise
            except Exception as exc:  # reported to the poller, never lost
                logger.exception("background command failed")
                kept.report(None, f"{type(exc).__name__}: {exc}", exit_code=-1)
            else:
                cutter.cancel()
                kept.report(streams[0].end(), streams[1].end(), done.exit_code, done.timed_out)
            finally:
                cutter.cancel()

        kept.task = asyncio.create_task(background(), name=f"command {kept.command.id}")
        return kept.command

    def search(
        self,
        scope: Scope,
        *,
        kind: str | None = None,
        command_id: str | None = None,
        order_gt: int | None = None,
        descending: bool = False,
        limit: int = 100,
    ) -> list[BashCommand | BashOutput]:
        scoped = self._scopes.get(scope.key, _Scoped())
        found: list[BashCommand | BashOutput] = []
        for kept in scoped.commands.values():
            if command_id is not None and kept.command.id != command_id:
                continue
            if kind in (None, "BashCommand") and order_gt is None:
                found.append(kept.command)
            if kind in (None, "BashOutput"):
                found.extend(
                    out for out in kept.outputs if order_gt is None or out.order > order_gt
                )
        found.sort(key=lambda e: e.timestamp, reverse=descending)
        return found[:limit]

    async def stop(self, scope: Scope, command_id: str) -> bool:
        """Stop a running command (its process group is killed); False for an unknown id."""
        kept = self._scopes.get(scope.key, _Scoped()).commands.get(command_id)
        if kept is None:
            return False
        if kept.task is not None and not kept.task.done():
            kept.task.cancel()
            await asyncio.gather(kept.task, return_exceptions=True)
        return True

    def forget(self, key: str) -> None:
        """A conversation was deleted: stop and drop its commands."""
        scoped = self._scopes.pop(key, None)
        for kept in scoped.commands.values() if scoped else ():
            if kept.task is not None:
                kept.task.cancel()

    async def close(self) -> None:
        tasks = [
            k.task
            for s in self._scopes.values()
            for k in s.commands.values()
            if k.task is not None and not k.task.done()
        ]
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks, return_exceptions=True)

    @staticmethod
    def _forget_old(scoped: _Scoped) -> None:
        while len(scoped.commands) >= MAX_KEPT:
            finished = next(
                (k for k, v in scoped.commands.items() if v.task is None or v.task.done()), None
            )
            if finished is None:  # all running: keep them, start no more
                raise Conflict(
                    f"{MAX_KEPT} background commands are still running here; stop "
                    "one (or wait for one to end) before starting another"
                )
            del scoped.commands[finished]
