"""What one conversation keeps in its directory: its record (meta.json), rewritten whole on
each change, and its event log, opened the first time something needs it.

Start-up reads only the records; a conversation nobody looks at never opens its log. Both
files stop with the conversation (its `closed` event set, as it is closed): a deleted
conversation must not come back through a late save, and its log is not opened again
(ConversationGone), though a log already open still takes what is written while it closes
(SessionEnd hooks) until it is drained and closed (`LogFile.close`).

A new conversation's files are made together, in one thread hop (`create`): its working
directory, its directory, its log and its record. Each hop waits for a free worker thread and a
core, which on a busy host costs more than the file work itself.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_server.conversations.fanout import Fanout
from agent_server.errors import ConversationGone
from agent_server.log import LOG_FILE_NAME, EventLog
from agent_server.record import StoredConversation
from agent_server.telemetry import Telemetry
from core.files import write_json
from core.masking import Masker

META_FILE = "meta.json"


class WorkingDirError(Exception):
    """The working directory cannot be made, or is not a directory (the message says which)."""


def make_working_dir(path: Path) -> None:
    """`path` made when missing (blocking); WorkingDirError when it cannot be used."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkingDirError(f"cannot create the working directory: {exc.strerror}") from None
    if not path.is_dir():
        raise WorkingDirError("not a directory")


async def create(meta: MetaFile, log: LogFile, working_dir: Path) -> None:
    """A new conversation's files, in one thread hop: its working directory (made when
    missing: WorkingDirError), its directory, its event log (opened, so the first append needs
    no hop of its own) and then its record, written atomically as every save writes it. A
    directory holding a record always holds its log, and the record's directory sync makes the
    log's entry durable with it. When a step fails there is no conversation: the log is closed
    (its empty file may stay, never loaded without a record beside it)."""
    async with meta.lock:
        data = meta.snapshot()
        opened = await asyncio.to_thread(
            _create, working_dir, log.opener(), functools.partial(write_json, meta.path, data)
        )
    log.adopt(opened)


def _create(
    working_dir: Path, open_log: Callable[[], EventLog], write_meta: Callable[[], None]
) -> EventLog:
    make_working_dir(working_dir)
    opened = open_log()
    try:
        write_meta()
    except BaseException:
        opened.close()
        raise
    return opened


class MetaFile:
    """The record's file: one writer at a time, each writing the latest record."""

    def __init__(self, record: StoredConversation, directory: Path, closed: asyncio.Event) -> None:
        self.record, self.path, self._closed = record, directory / META_FILE, closed
        #: Held while the record is being written.
        self.lock = asyncio.Lock()

    def snapshot(self) -> dict[str, Any]:
        """The record as the file holds it, stamped with the time of this write."""
        self.record.updated_at = datetime.now(UTC)
        return self.record.model_dump(mode="json")

    async def save(self) -> None:
        if self._closed.is_set():  # a deleted conversation must not come back
            return
        async with self.lock:
            data = self.snapshot()
            await asyncio.to_thread(write_json, self.path, data)


class LogFile:
    """The conversation's event log, opened once on first need: every event masked, handed
    to the fanout's sinks as it is written, and HEAD put back where the record says."""

    def __init__(
        self,
        record: StoredConversation,
        directory: Path,
        *,
        masker: Masker,
        fanout: Fanout,
        telemetry: Telemetry,
        closed: asyncio.Event,
    ) -> None:
        self.record, self.directory = record, directory
        self._masker, self._fanout, self._telemetry = masker, fanout, telemetry
        self._closed = closed
        self._log: EventLog | None = None
        self._lock = asyncio.Lock()

    @property
    def current(self) -> EventLog | None:
        """The log, when it is open (None until something needed it, and once closed)."""
        return self._log

    async def get(self) -> EventLog:
        """The log, opened now if it was not (ConversationGone once the conversation closed)."""
        conversation_id = str(self.record.id)
        if self._closed.is_set():
            raise ConversationGone(conversation_id)
        if self._log is None:
            async with self._lock:
                if self._log is None:
                    self.adopt(await asyncio.to_thread(self.opener()))
        assert self._log is not None
        return self._log

    def opener(self) -> Callable[[], EventLog]:
        """What opens the log (blocking: run it off the loop), its sinks taken now."""
        return functools.partial(
            EventLog.open,
            self.directory / LOG_FILE_NAME,
            redactor=self._masker.data,
            sinks=self._fanout.sinks(str(self.record.id)),
            on_write=self._telemetry.metrics.log_written,
        )

    def adopt(self, log: EventLog) -> None:
        """The log `opener` opened: HEAD put back where the record says, and handed to the
        fanout (the webhook pusher reads from it)."""
        if self.record.head_set_at is not None:
            log.restore_head(self.record.head_event_id, self.record.head_set_at)
        self._log = log
        self._fanout.attach(str(self.record.id), self.directory, log, self._closed)

    async def close(self) -> None:
        """Drain what is being written, then close the log (if it was ever opened)."""
        if self._log is not None:
            await self._log.drain()
            self._log.close()
            self._log = None
