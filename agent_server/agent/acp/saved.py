"""What an ACP conversation keeps across restarts of the server (its STATE_FILE, beside the
conversation's metadata): the last user message sent to the agent, and the agent's own
session (its id and working directory) so a new agent process can resume it with
`session/load` instead of starting without the conversation's memory.

The file is written before the prompt that depends on it is sent, atomically, so a SIGKILL of
the server at any moment leaves the last state the agent was told about. When the session
cannot be resumed, `lost_note` tells the user; a new session is kept (`NewSession.keep`) by the
turn that uses it, so a side question that started the agent changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ValidationError

from agent_server.agent.sink import EventSink
from core.files import read_json, write_json
from events import ServerErrorEvent

STATE_FILE = "acp.json"


class SavedState(BaseModel):
    #: The id of the last user message sent to the agent (the next prompt sends those after).
    prompted: str | None = None
    #: The agent's session (from session/new) and the directory it was opened in: a session
    #: is only loaded again in the same directory (agents keep them by working directory).
    session_id: str | None = None
    session_cwd: str | None = None
    #: The session's cumulative cost (USD) last counted: a resumed session goes on from it.
    cost_seen: float = 0.0


class SavedFile:
    """The conversation's SavedState, read once and rewritten whole on each change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._state: SavedState | None = None

    async def get(self) -> SavedState:
        if self._state is None:
            self._state = SavedState()
            if await asyncio.to_thread(self.path.is_file):
                with contextlib.suppress(OSError, ValueError, ValidationError):
                    raw = await asyncio.to_thread(read_json, self.path)
                    self._state = SavedState.model_validate(raw)
        return self._state

    async def update(self, **changes: object) -> SavedState:
        state = (await self.get()).model_copy(update=changes)
        await asyncio.to_thread(write_json, self.path, state.model_dump(mode="json"))
        self._state = state
        return state


def lost_note(why: str) -> ServerErrorEvent:
    """What tells the user the agent's session could not be resumed (the run goes on)."""
    return ServerErrorEvent(
        source="environment",
        code="ACPSessionLost",
        detail=(
            f"The ACP agent could not resume its session ({why}). It goes on in a new session "
            "without its memory of this conversation's earlier turns (the events here are "
            "kept)."
        )[:2000],
    )


@dataclass(frozen=True)
class NewSession:
    """A session opened in place of the saved one (or where there was none)."""

    session_id: str
    cwd: str
    lost: str | None
    """Why the saved one could not be resumed; None when there was none."""

    async def keep(self, saved: SavedFile, sink: EventSink) -> None:
        await saved.update(session_id=self.session_id, session_cwd=self.cwd, cost_seen=0.0)
        if self.lost is not None:
            await sink.append(lost_note(sink.masker.text(self.lost)))
