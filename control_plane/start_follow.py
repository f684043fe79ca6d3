"""Following a start task's stages as they are stored (`stream-start`, the console's start page).

A follower reads the task's row, so it sees the stages any control plane stores. Those this
process stores wake the task's followers at once (`Followers.ring`), and the last one (READY
or ERROR) comes with its row as it was written, which they take without reading it again;
another process's are read every 0.1 s. Only the followers of the task whose stage was stored
wake: one wake-up shared by all had, during a burst of streamed starts, every follower read the
database again at each stage of every start.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from control_plane.models import TaskRow
from control_plane.store import Database, tasks

#: Seconds between reads of a followed task when nothing here rings: another process's stages.
POLL = 0.1


class _Bell:
    """A followed task's next stage: set when this process stores it, with the row written."""

    def __init__(self) -> None:
        self.rung = asyncio.Event()
        self.row: TaskRow | None = None


class Followers:
    """The tasks followed in this process, each with the bell its next stored stage rings.

    An entry lives while a follower waits on it (`follow` drops it on leaving) or until the
    task's next stage rings it, so none outlives its followers."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._bells: dict[str, _Bell] = {}

    def ring(self, task_id: str, row: TaskRow | None = None) -> None:
        """Wake the task's followers: one of its stages was stored (`row`: as it was written,
        which they take instead of reading it again)."""
        bell = self._bells.pop(task_id, None)
        if bell is not None:
            bell.row = row
            bell.rung.set()

    async def follow(self, task: TaskRow, seconds: float) -> AsyncIterator[TaskRow]:
        """The task each time its stage (or detail) changes after `task`, until it is finished
        or `seconds` have passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        seen = (task.status, task.detail)
        bell = _Bell()
        found: TaskRow | None = None
        try:
            while not task.status.finished and loop.time() < deadline:
                # Taken before the read: a stage stored after it rings it.
                bell = self._bells.setdefault(task.id, _Bell())
                if found is None:
                    got = await tasks.get_many(self.db, [task.id], task.user_id)
                    found = got.get(task.id)
                    if found is None:
                        return
                task, found = found, None
                if (task.status, task.detail) != seen:
                    seen = (task.status, task.detail)
                    yield task
                if not task.status.finished:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(bell.rung.wait(), POLL)
                    # The last stage as it was written, without a read; an earlier one is read
                    # again: a stage stored before this follower's next bell rings none.
                    last = bell.row if bell.rung.is_set() else None
                    found = last if last is not None and last.status.finished else None
        finally:  # another follower of the task falls back to reading every POLL
            if self._bells.get(task.id) is bell:
                del self._bells[task.id]
