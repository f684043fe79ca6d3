"""A conversation's trajectory as a zip: meta.json and its events as stored (events.jsonl).

The zip is written to a sink that hands its bytes on as they are made, and the events are
read from the log in batches, so the archive of a long conversation is never whole in memory.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from typing import IO, cast

from agent_server.log import EventLog

#: Events read from the log per batch.
BATCH = 500


class _Sink:
    """A write-only, unseekable file: zipfile then writes data descriptors, never seeks."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        out, self._parts = b"".join(self._parts), []
        return out


def trajectory_zip(meta: bytes, log: EventLog, count: int) -> Iterator[bytes]:
    """The zip's bytes, in pieces (blocking: iterate it in a thread). `count` events are
    included: those in the log when the download began."""
    sink = _Sink()
    archive = zipfile.ZipFile(cast(IO[bytes], sink), "w", compression=zipfile.ZIP_DEFLATED)
    with archive:
        archive.writestr("meta.json", meta)
        yield sink.take()
        # force_zip64: the size is unknown when the entry starts and may pass 4 GiB.
        with archive.open("events.jsonl", "w", force_zip64=True) as entry:
            for start in range(0, count, BATCH):
                for line in log.read(range(start, min(count, start + BATCH))):
                    entry.write(line + b"\n")
                if piece := sink.take():
                    yield piece
    yield sink.take()
