"""Following a start task's stages as they are stored (`stream-start`, the console's start page).

A follower reads the task's row, so it sees the stages any control plane stores. Those this
process stores wake the task's followers at once (`Followers.ring`); another process's are
read every 0.1 s. Only the followers of the task whose stage was stored wake: one wake-up
shared by all had, during a burst of streamed starts, every follower read the database again
at each stage of every start.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from control_plane.models import TaskRow
from control_plane.store import Database, tasks

#: Seconds between reads of a followed task when nothing here rings: another process's stages.
POLL = 0.1


class Followers:
    """The tasks followed in this process, each with the event its next stored stage sets.

    An entry lives while a follower waits on it (`follow` drops it on leaving) or until the
    task's next stage rings it, so none outlives its followers."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._moved: dict[str, asyncio.Event] = {}

    def ring(self, task_id: str) -> None:
        """Wake the task's followers: one of its stages was stored."""
        moved = self._moved.pop(task_id, None)
        if moved is not None:
            moved.set()

    async def follow(self, task: TaskRow, seconds: float) -> AsyncIterator[TaskRow]:
        """The task each time its stage (or detail) changes after `task`, until it is finished
        or `seconds` have passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        seen = (task.status, task.detail)
        moved = asyncio.Event()
        try:
            while not task.status.finished and loop.time() < deadline:
                # Taken before the read: a stage stored after it rings it.
                moved = self._moved.setdefault(task.id, asyncio.Event())
                found = (await tasks.get_many(self.db, [task.id], task.user_id)).get(task.id)
                if found is None:
                    return
                task = found
                if (task.status, task.detail) != seen:
                    seen = (task.status, task.detail)
                    yield task
                if not task.status.finished:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(moved.wait(), POLL)
        finally:  # another follower of the task falls back to reading every POLL
            if self._moved.get(task.id) is moved:
                del self._moved[task.id]
