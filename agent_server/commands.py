"""Shell commands run in a workspace outside the agent's terminal: at once, or in the
background with their output kept for polling (the OpenHands bash routes).

A background command is a BashCommand; its result is a BashOutput (order 0, its exit code, its
stdout and stderr masked and capped) once it has ended. Clients poll `search` for it. Commands
are kept per scope (the host, or one conversation): the last MAX_KEPT of each, finished ones
forgotten first; when all of them are still running, a new one is refused (409) until one
ends (each ends by its timeout), so neither the list nor the processes grow without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field

from agent_server.workspace import Scope, masked_keep, output_text
from core.processes import MAX_OUTPUT_BYTES, child_env, run_process
from events import format_timestamp
from web.errors import Conflict

logger = logging.getLogger(__name__)

#: Commands kept per scope.
MAX_KEPT = 200


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
    """A command's result (exit_code null: still running; this server sends one at the end)."""

    kind: Literal["BashOutput"] = "BashOutput"
    id: str = Field(default_factory=lambda: str(uuid.uuid4()))
    timestamp: str = Field(default_factory=_now)
    command_id: str
    order: int = 0
    exit_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None
    timed_out: bool = False


@dataclass
class _Kept:
    command: BashCommand
    output: BashOutput | None = None
    task: asyncio.Task[None] | None = None


@dataclass
class _Scoped:
    commands: dict[str, _Kept] = field(default_factory=dict)  # in start order


class Commands:
    """Background commands by scope key."""

    def __init__(self) -> None:
        self._scopes: dict[str, _Scoped] = {}

    async def run(self, scope: Scope, command: str, cwd: str | None, timeout: float,
                  env: Mapping[str, str] | None = None, git: Mapping[str, str] | None = None,
                  command_id: str = "") -> BashOutput:
        """Run to its end (or timeout: the process group is killed) and return its result,
        secrets in its environment and masked in its output."""
        where = await scope.directory(cwd, "cwd")
        done = await run_process(["bash", "-c", command], where,
                                 child_env(git or {}, scope.secrets, env or {}), timeout,
                                 keep=masked_keep(scope.secrets))
        return BashOutput(
            command_id=command_id or str(uuid.uuid4()), exit_code=done.exit_code,
            timed_out=done.timed_out,
            stdout=output_text(done.stdout, MAX_OUTPUT_BYTES, scope.masker),
            stderr=output_text(done.stderr, MAX_OUTPUT_BYTES, scope.masker))

    async def start(self, scope: Scope, command: str, cwd: str | None, timeout: float,
                    git: Mapping[str, str] | None = None) -> BashCommand:
        """Start in the background; its BashOutput appears in `search` when it ends.
        Conflict (409) while MAX_KEPT commands of the scope are all still running."""
        await scope.directory(cwd, "cwd")  # a bad cwd is the caller's error now, not a result later
        scoped = self._scopes.setdefault(scope.key, _Scoped())
        self._forget_old(scoped)
        kept = _Kept(BashCommand(command=command, cwd=cwd, timeout=timeout))
        scoped.commands[kept.command.id] = kept

        async def background() -> None:
            try:
                kept.output = await self.run(scope, command, cwd, timeout, git=git,
                                             command_id=kept.command.id)
            except asyncio.CancelledError:
                kept.output = BashOutput(command_id=kept.command.id, exit_code=-15,
                                         stderr="Stopped.")
                raise
            except Exception as exc:  # reported to the poller, never lost
                logger.exception("background command failed")
                kept.output = BashOutput(command_id=kept.command.id, exit_code=-1,
                                         stderr=f"{type(exc).__name__}: {exc}")

        kept.task = asyncio.create_task(background(), name=f"command {kept.command.id}")
        return kept.command

    def search(self, scope: Scope, *, kind: str | None = None, command_id: str | None = None,
               order_gt: int | None = None, descending: bool = False,
               limit: int = 100) -> list[BashCommand | BashOutput]:
        scoped = self._scopes.get(scope.key, _Scoped())
        found: list[BashCommand | BashOutput] = []
        for kept in scoped.commands.values():
            if command_id is not None and kept.command.id != command_id:
                continue
            if kind in (None, "BashCommand") and order_gt is None:
                found.append(kept.command)
            out = kept.output
            if out is not None and kind in (None, "BashOutput") and (
                    order_gt is None or out.order > order_gt):
                found.append(out)
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
        for kept in (scoped.commands.values() if scoped else ()):
            if kept.task is not None:
                kept.task.cancel()

    async def close(self) -> None:
        tasks = [k.task for s in self._scopes.values() for k in s.commands.values()
                 if k.task is not None and not k.task.done()]
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks, return_exceptions=True)

    @staticmethod
    def _forget_old(scoped: _Scoped) -> None:
        while len(scoped.commands) >= MAX_KEPT:
            finished = next((k for k, v in scoped.commands.items()
                             if v.task is None or v.task.done()), None)
            if finished is None:  # all running: keep them, start no more
                raise Conflict(f"{MAX_KEPT} background commands are still running here; stop "
                               "one (or wait for one to end) before starting another")
            del scoped.commands[finished]

