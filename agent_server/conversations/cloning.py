"""The conversation's repository (SPEC 2.5) cloned once: before the first step of a run, or at
once, in the background, when the conversation is created without running (the control
plane's start task waits for `repository_status` either way).

A failure in a run ends it in ERROR with a ConversationErrorEvent (RepositoryCloneFailed,
masked); in the background it is the same event while the status stays idle. Either way the
next run tries again (after, say, POST .../secrets supplied the missing credential).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from agent_server.record import StoredConversation
from agent_server.repository import CloneFailed, clone
from core.masking import Masker
from events import ConversationErrorEvent, Event


class Conversation(Protocol):
    """What of a conversation a clone reads and writes."""

    record: StoredConversation
    secret_values: dict[str, str]
    masker: Masker

    @property
    def id(self) -> str: ...
    @property
    def working_dir(self) -> Path: ...
    def git_author(self) -> Mapping[str, str]: ...
    async def fail(self, code: str, detail: str) -> None: ...
    async def append(self, *events: Event) -> list[Event]: ...
    async def save(self) -> None: ...


class RepositoryClone:
    def __init__(self) -> None:
        #: One clone at a time: the background one, then a run's (which finds it done).
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[bool] | None = None

    def start(self, conv: Conversation) -> None:
        """The clone in the background (a creation that does not run at once)."""
        if conv.record.repository is not None and conv.record.repository_status is None:
            self._task = asyncio.create_task(
                self.ensure(conv, in_run=False), name=f"clone {conv.id}"
            )

    async def ensure(self, conv: Conversation, in_run: bool = True) -> bool:
        """Cloned (now, or before); False when the clone failed (and was reported)."""
        async with self._lock:
            record = conv.record
            if record.repository is None or record.repository_status == "cloned":
                return True
            try:
                await clone(
                    record.repository,
                    conv.working_dir,
                    conv.secret_values,
                    conv.masker,
                    conv.git_author(),
                )
            except CloneFailed as failure:
                if in_run:
                    await conv.fail("RepositoryCloneFailed", failure.detail)
                else:
                    await conv.append(
                        ConversationErrorEvent(
                            source="environment",
                            code="RepositoryCloneFailed",
                            detail=conv.masker.text(failure.detail)[:2000],
                        )
                    )
                # After the event: whoever sees "failed" (the start task) finds the reason.
                record.repository_status = "failed"
                await conv.save()
                return False
            record.repository_status = "cloned"
            await conv.save()
            return True

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(task, return_exceptions=True)
