"""AgentLink: one conversation's line to its ACP agent, across the lives of the agent's process.

The session asks for the connection when it needs it (`connected`): the agent is started then,
the first time, and again when its process ended between turns (a crash, a kill, a restart of
this server). A new process resumes the agent's session with `session/load` when the agent
offers it, so the agent keeps its memory of the conversation; `saved.py` keeps the session's id
and working directory for that (a session is only loaded again in the directory it was opened
in). What the agent replays while it loads is already in the log: the link names the session
being replayed (`replaying`) until the next prompt, and the session drops its updates.

When the earlier session cannot be resumed, the agent starts again without its memory. The new
session is not kept at once: it is kept (written to acp.json, and the user told with a
ServerErrorEvent `ACPSessionLost`) by the next turn that uses it (`keep`). A side question that
started the agent (`quiet`) therefore changes nothing the conversation keeps.

Stopping the agent (`drop`) closes the protocol connection first, so a request in flight
fails, lets the turn that was waiting on it end, then stops the process and everything it
started. What a turn in flight means for the conversation (its state, a permission waiting)
is the session's business, not the link's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from agent_server.agent.acp.client import WorkspaceClient
from agent_server.agent.acp.process import AgentConnection
from agent_server.agent.acp.saved import NewSession, SavedFile
from agent_server.agent.acp.usage import ACPUsage
from agent_server.agent.sink import EventSink
from agent_server.agent.spec import ACPAgentSpec

logger = logging.getLogger(__name__)


class AgentLink:
    """The agent's connection (`current`), started when first needed and started again when
    its process has ended; one start at a time.

    `env` gives the agent's environment as it is now (the conversation's secrets change);
    `ended` stops what still runs on a process found ended before a new one is started (the
    session's disconnect: a turn in flight ends with it); `usage` is told where the agent's
    cumulative cost starts again."""

    def __init__(
        self,
        agent: ACPAgentSpec,
        working_dir: Path,
        *,
        saved: SavedFile,
        client: WorkspaceClient,
        sink: EventSink,
        usage: ACPUsage,
        env: Callable[[], Mapping[str, str]],
        ended: Callable[[], Awaitable[None]],
        name: str,
    ) -> None:
        self.agent, self.working_dir, self.saved = agent, working_dir, saved
        self.client, self.sink, self.usage = client, sink, usage
        self._env, self._ended, self._name = env, ended, name
        #: The agent's process and the protocol session over it (None: not started, or
        #: stopped).
        self.current: AgentConnection | None = None
        self._start_lock = asyncio.Lock()
        #: The session being loaded: its replayed updates are dropped until the next prompt.
        self.replaying: str | None = None
        #: A new session not kept yet (`keep`).
        self._unkept: NewSession | None = None

    @property
    def alive(self) -> bool:
        """Whether the agent's process is running (False when none was started)."""
        return self.current is not None and self.current.alive

    def owns(self, session_id: str) -> bool:
        """Whether `session_id` is the conversation's session on the agent (the one open, or
        the one being loaded)."""
        if session_id == self.replaying:
            return True
        return self.current is not None and session_id == self.current.session_id

    async def connected(self, quiet: bool = False) -> AgentConnection:
        """The agent's connection, started (again, when the process ended between turns);
        `quiet` (a side question): a new session is kept by the next turn instead."""
        async with self._start_lock:
            link = self.current
            if link is not None and link.alive:
                if not quiet:
                    await self.keep()
                return link
            if link is not None:
                logger.info(
                    "ACP agent of %s had ended (%s): starting it again",
                    self._name,
                    link.proc.exit_text(),
                )
                await self._ended()
            saved, cwd = await self.saved.get(), str(self.working_dir)
            self.replaying = saved.session_id if saved.session_cwd == cwd else None
            try:
                link = await AgentConnection.open(
                    self.agent,
                    self.working_dir,
                    self._env(),
                    self.client,
                    self.sink.masker.text,
                    self.replaying,
                )
            except BaseException:
                self.replaying = None
                raise
            self.current = link
            if link.opened.resumed:
                self.usage.restart(max(self.usage.cost_seen, saved.cost_seen))
                return link
            self.replaying = None
            self.usage.restart(0.0)
            why = link.opened.lost or "it was opened in another working directory"
            self._unkept = NewSession(link.session_id, cwd, why if saved.session_id else None)
            if not quiet:
                await self.keep()
            return link

    async def keep(self) -> None:
        """Keep the new session a side question opened, if any (acp.json; the user told when
        the earlier one was lost)."""
        unkept, self._unkept = self._unkept, None
        if unkept is not None:
            await unkept.keep(self.saved, self.sink)

    async def drop(self, turn: asyncio.Task[Any] | None = None) -> None:
        """Stop the process and all it started: the connection is closed first (a request in
        flight fails), `turn` (cancelled if still going) is let end, then the process stops."""
        link, self.current = self.current, None
        if turn is not None and not turn.done():
            turn.cancel()
        if link is not None:
            await link.hang_up()
        if turn is not None:
            await asyncio.gather(turn, return_exceptions=True)
        if link is not None:
            await link.stop()
