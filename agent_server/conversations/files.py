"""What one conversation keeps in its directory: its record (meta.json), rewritten whole on
each change, and its event log, opened the first time something needs it.

Start-up reads only the records; a conversation nobody looks at never opens its log. Both
files stop with the conversation (its `closed` event set, as it is closed): a deleted
conversation must not come back through a late save, and its log is not opened again
(ConversationGone), though a log already open still takes what is written while it closes
(SessionEnd hooks) until it is drained and closed (`LogFile.close`).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from agent_server.conversations.fanout import Fanout
from agent_server.errors import ConversationGone
from agent_server.log import LOG_FILE_NAME, EventLog
from agent_server.record import StoredConversation
from agent_server.telemetry import Telemetry
from core.files import write_json
from core.masking import Masker

META_FILE = "meta.json"


class MetaFile:
    """The record's file: one writer at a time, each writing the latest record."""

    def __init__(self, record: StoredConversation, directory: Path, closed: asyncio.Event) -> None:
        self.record, self.path, self._closed = record, directory / META_FILE, closed
        self._lock = asyncio.Lock()

    async def save(self) -> None:
        if self._closed.is_set():  # a deleted conversation must not come back
            return
        async with self._lock:
            self.record.updated_at = datetime.now(UTC)
            data = self.record.model_dump(mode="json")
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
                    log = await asyncio.to_thread(
                        EventLog.open,
                        self.directory / LOG_FILE_NAME,
                        redactor=self._masker.data,
                        sinks=self._fanout.sinks(conversation_id),
                        on_write=self._telemetry.metrics.log_written,
                    )
                    if self.record.head_set_at is not None:
                        log.restore_head(self.record.head_event_id, self.record.head_set_at)
                    self._log = log
                    self._fanout.attach(conversation_id, self.directory, log, self._closed)
        return self._log

    async def close(self) -> None:
        """Drain what is being written, then close the log (if it was ever opened)."""
        if self._log is not None:
            await self._log.drain()
            self._log.close()
            self._log = None
