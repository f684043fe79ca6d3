"""From terminal bytes to text: escape cleaning, and capping and saving long output."""

from __future__ import annotations

import asyncio
import codecs
import re
from pathlib import Path
from typing import IO

from ulid import ULID

from core.masking import Masker
from tools.base import run_in_thread

# -- tuning that is no one's business but this module's -----------------------------------

#: An escape sequence split between reads is held back up to this size.
MAX_ESCAPE_CHARS = 4096
#: A line still open (a progress bar, a prompt) is held back up to this size.
MAX_OPEN_LINE_CHARS = 64 * 1024


_ESCAPE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor movement, erasing
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: window titles, hyperlinks
    r"|\x1b[PX^_][^\x1b]*\x1b\\"  # DCS, SOS, PM and APC strings
    r"|\x1b[ -/]*[0-~]"  # the short ones: ESC 7, ESC ( B, ESC =, ...
)
#: An escape sequence that has begun but not ended at the end of the text.
_OPEN_ESCAPE = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[PX^_][^\x1b]*\x1b?|[ -/]*)\Z"
)
_CRLF = re.compile(r"\r+\n")
_BACKSPACED = re.compile(r"[^\n\x08]\x08")
#: Control characters but tab and newline (carriage returns are dealt with before).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _last_overwrite(line: str) -> str:
    """What a terminal shows of a line rewritten with carriage returns: the last rewrite."""
    return line[line.rfind("\r", 0, len(line) - 1) + 1 :]


class Cleaner:
    """Turns the terminal's bytes into the text a person would read, one read at a time.

    Stateful because a UTF-8 character, an escape sequence or a line rewritten with carriage
    returns can each be split between two reads.
    """

    def __init__(self, masker: Masker) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._escape = ""  # the start of an escape sequence whose end has not come yet
        self._line = ""  # the open line: carriage returns may still rewrite it
        self._masker = masker

    def feed(self, data: bytes) -> str:
        text = self._escape + self._decoder.decode(data)
        self._escape = ""
        if "\x1b" in text:
            opened = _OPEN_ESCAPE.search(text, max(0, len(text) - MAX_ESCAPE_CHARS))
            if opened is not None:
                self._escape, text = text[opened.start() :], text[: opened.start()]
            text = _ESCAPE.sub("", text)
        text = self._line + text
        cut = text.rfind("\n") + 1
        done, line = text[:cut], text[cut:]
        if len(line) > MAX_OPEN_LINE_CHARS:
            line = _last_overwrite(line)
            if len(line) > MAX_OPEN_LINE_CHARS:  # one giant line: let it through as it is
                done, line = done + line, ""
        self._line = line
        return self._clean(done)

    def flush(self) -> str:
        """The open line too: called when output is shown (a prompt waits for an answer)."""
        line, self._line = self._line, ""
        return self._clean(line)

    def _clean(self, text: str) -> str:
        if "\r" in text:
            text = _CRLF.sub("\n", text)
            if "\r" in text:
                text = "\n".join(_last_overwrite(line) for line in text.split("\n"))
        if "\x08" in text:
            text = _BACKSPACED.sub("", text)
        # Masked here, before the text is saved or shown; a secret split by a flush is missed.
        return self._masker.text(_CONTROL.sub("", text))


class Capture:
    """The output behind one observation: head and tail in memory, and all of it on disk once
    it is longer than can be shown, so 100 MB of output costs tens of kilobytes of memory.
    """

    def __init__(self, limit: int, save_dir: Path) -> None:
        self._half = limit // 2
        self._save_dir = save_dir
        self._head = self._tail = ""
        self.total = 0
        self.path: Path | None = None  # where all of it is saved, once it is too long
        self._unsaved: list[str] = []
        self.unsaved_chars = 0
        self._file: IO[str] | None = None
        self._error = ""  # why it could not be saved
        self._lock = asyncio.Lock()  # one writer of the file at a time

    def write(self, text: str) -> None:
        if not text:
            return
        self.total += len(text)
        room = max(self._half - len(self._head), 0)
        self._head += text[:room]
        rest = text[room:]
        if self.path is None and self.total > 2 * self._half:
            # Nothing was dropped yet: head and tail still hold everything before `rest`.
            self.path = self._save_dir / f"{ULID()}.txt"
            self._queue(self._head + self._tail + rest)
        elif self.path is not None:
            self._queue(text)
        self._tail = (self._tail + rest)[-self._half :]

    def _queue(self, text: str) -> None:
        if not self._error:
            self._unsaved.append(text)
            self.unsaved_chars += len(text)

    async def drain(self) -> None:
        """Write what is queued, in a thread: a slow disk must not stall the event loop."""
        async with self._lock:
            chunks, self._unsaved, self.unsaved_chars = self._unsaved, [], 0
            if chunks:
                try:
                    await run_in_thread(self._append, chunks)
                except OSError as e:  # a full disk costs the saved copy, not the call
                    self._error = str(e)

    def _append(self, chunks: list[str]) -> None:
        if self._file is None:
            assert self.path is not None
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 (closed in finish)
        self._file.writelines(chunks)

    async def finish(self) -> str:
        """Save the rest, close the file, and give the text to show."""
        await self.drain()
        async with self._lock:
            if self._file is not None:
                await run_in_thread(self._file.close)
                self._file = None
        if self.path is None:
            return self._head + self._tail
        cut = self.total - len(self._head) - len(self._tail)
        where = f"could not be saved ({self._error})" if self._error else f"is saved in {self.path}"
        return (
            f"{self._head}\n[... {cut:,} characters cut here; the whole output "
            f"({self.total:,} characters) {where} ...]\n{self._tail}"
        )
