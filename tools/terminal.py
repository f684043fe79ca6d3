"""terminal: one persistent bash per conversation, driven through a pseudo-terminal.

Why a pty: programs behave as they do for a person (line-buffered output, prompts, C-c), and
bash gets job control, so each foreground command has its own process group that a timeout
can kill while the shell lives on. The event loop reads the pty itself (no tmux server, no
thread per shell): a round trip takes well under a millisecond and an idle shell costs what
bash does, a few megabytes.

How a command runs: its text goes to a private file and the shell is typed a fixed trigger line
that reads the file and `eval`s it. So heredocs, many-line commands and lines longer than the
terminal's 4 KiB line limit work, and the command is never echoed. The end of a command is the
next prompt: PROMPT_COMMAND prints a marker (a control byte, a random nonce, then $?, $!, $PWD
and $PATH). The function holds the byte as an octal escape that only printf turns into the
byte, so printing the function or the environment cannot fake a marker.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import enum
import fcntl
import functools
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import termios
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import ConfigDict, Field
from ulid import ULID

from agent_server.events.content import Strict
from agent_server.secrets import Masker
from tools.base import Action, Observation, TextContent, Tool, ToolContext, ToolError
from tools.base import run_in_thread, single

# -- what the model sends and reads -------------------------------------------------------


class TerminalAction(Action):
    kind: Literal["TerminalAction"] = "TerminalAction"
    command: str = Field(
        description=(
            "The bash command to run, e.g. `ls -la`. Several lines, `&&`, `;` and heredocs "
            "are fine. While a command is still running: an empty string (with is_input "
            "false) waits for more of its output; with is_input true, the text to type into "
            "it (Enter is added), or C-c, C-d or C-z to send that control key."
        )
    )
    is_input: bool = Field(
        default=False,
        description=(
            "If true, `command` is typed into the command that is still running (an answer "
            "to its prompt, or a control key such as C-c) instead of starting a new command."
        ),
    )
    timeout: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Hard limit in seconds for this call: when it is reached the running command is "
            "stopped (C-c, then killed). Without it (or with 0) the call returns once the "
            "command has printed nothing for a few seconds, and the command keeps running. "
            "Set it for long commands whose output pauses, such as builds and installs."
        ),
    )
    reset: bool = Field(
        default=False,
        description=(
            "If true, kill the shell and everything it started and open a new one in the "
            "initial directory, then run `command` there if it is not empty. Only for a shell "
            "that no longer responds: the working directory, environment variables and "
            "background processes are lost. Not with is_input."
        ),
    )


class CmdOutputMetadata(Strict):
    """What the shell said about itself at its last prompt (OpenHands' shape)."""

    exit_code: int = -1
    #: `$!`: the last process started in the background, -1 when there is none.
    pid: int = -1
    username: str | None = None
    hostname: str | None = None
    working_dir: str | None = None
    py_interpreter_path: str | None = None
    prefix: str = ""
    suffix: str = ""


class TerminalObservation(Observation):
    kind: Literal["TerminalObservation"] = "TerminalObservation"
    command: str | None
    #: -1 while the command is still running; None when no command ran.
    exit_code: int | None = None
    timeout: bool = False
    metadata: CmdOutputMetadata = Field(default_factory=CmdOutputMetadata)
    full_output_save_dir: str | None = None


class TerminalParams(Strict):
    """What a conversation may tune (`params` of the tool set); the defaults suit a model."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    no_output_timeout: float = Field(default=10.0, gt=0)
    """Seconds without new output after which a call returns; the command keeps running."""

    max_call_seconds: float = Field(default=300.0, gt=0)
    """Seconds after which a call without `timeout` returns even while the command keeps
    printing (a server in the foreground, `ping`); the command keeps running."""

    max_output_chars: int = Field(default=30_000, ge=200)
    """Longer output is cut in the middle (head and tail kept) and saved whole to a file."""

    kill_grace: float = Field(default=2.0, gt=0)
    """Seconds a command gets to exit after C-c before its process group is killed."""

    start_timeout: float = Field(default=10.0, gt=0)
    """Seconds bash may take to show its first prompt."""


# -- tuning that is no one's business but this module's -----------------------------------

#: Withheld from the shell: the server's own credentials are not the model's to use.
WITHHELD_ENV = ("SESSION_API_KEY", "AGENT_SERVER_")
#: A dumb terminal: programs then skip redraws and colours, and pagers cannot hold a call.
TERMINAL_ENV = {"TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat", "MANPAGER": "cat"}
#: Rows and columns reported to programs that ask.
WINDOW = (50, 200)
#: Output not yet on disk beyond which the reader waits for the disk (and so does the shell).
MAX_UNSAVED_CHARS = 1 << 20
#: A marker is short; a marker start followed by this much without an end was not one.
MAX_MARKER_BYTES = 64 * 1024
#: An escape sequence split between reads is held back up to this size.
MAX_ESCAPE_CHARS = 4096
#: A line still open (a progress bar, a prompt) is held back up to this size.
MAX_OPEN_LINE_CHARS = 64 * 1024
#: Rounds of SIGKILL for a command list whose next member starts once the last is killed.
KILL_ROUNDS = 5
#: The shell runs as the server does (bash's `\u` would say the same).
USERNAME = pwd.getpwuid(os.getuid()).pw_name
#: Tags every process the shell starts, so close() finds daemons that left its session.
TAG_VARIABLE = "AGENT_TERMINAL_ID"
#: What bash reads at start. PS1 stays empty: after some syntax errors bash expands PS1 early,
#: with stale values, while PROMPT_COMMAND always runs just before the prompt. __agent_run
#: reads the command and returns the previous status, so that `$?` means what it says.
RC = r"""__agent_prompt() {
    __agent_status=$?
    builtin printf '\036NONCE\037%s\037%s\037%s\037%s\036' "$__agent_status" "$!" "$PWD" "$PATH" >&2
    PS1= PS2=
}
__agent_run() { IFS= builtin read -r -d '' __agent_cmd <SCRIPT; return $__agent_status; }
PROMPT_COMMAND=__agent_prompt
set +o history
unset HISTFILE
"""
#: What is typed for each command; `builtin`, so a function named `eval` cannot break it.
TRIGGER = b'__agent_run; builtin eval "$__agent_cmd"\n'


# -- from terminal bytes to text ----------------------------------------------------------

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


class _Cleaner:
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


class _Capture:
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


# -- the shell ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    """What bash reported when it came back to its prompt."""

    exit_code: int
    background_pid: int
    working_dir: str
    path: str


class Stop(enum.Enum):
    """How a running command was stopped."""

    INTERRUPTED = "with C-c"
    KILLED = "by killing it, as it ignored C-c"
    FAILED = "by killing the shell, which did not respond to C-c"


class Shell:
    """A bash in its own session on a pty, read by the event loop for as long as it lives.

    The pty is read even between calls, so background jobs that print never block on a full
    terminal; what they print waits for the next call.
    """

    def __init__(self, working_dir: Path, env: Mapping[str, str], masker: Masker,
                 save_dir: Path, max_output_chars: int) -> None:  # fmt: skip
        self.working_dir = working_dir
        self._nonce = os.urandom(8).hex()
        self._env = {**env, TAG_VARIABLE: self._nonce}
        self._new_capture = functools.partial(_Capture, max_output_chars, save_dir)
        self._marker_start = b"\x1e" + self._nonce.encode()
        self._marker = re.compile(
            re.escape(self._marker_start) + rb"\x1f(\d+)\x1f(\d*)\x1f([^\x1f]*)\x1f([^\x1e]*)\x1e"
        )
        self._cleaner = _Cleaner(masker)
        self._capture = self._new_capture()
        self._held = b""  # the beginning of what may be a marker, split between reads
        self._done: asyncio.Future[_Capture] | None = None  # the running command's end
        self._fd = self._script = self._pidfd = -1  # pty, command file, bash's pidfd
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._spawning: asyncio.Future[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._closing: asyncio.Future[int | None] | None = None
        self._exited = False
        self.prompt: Prompt | None = None
        self.last_output = 0.0  # loop time of the last bytes read

    @property
    def running(self) -> bool:
        """A command was sent and its prompt has not come back."""
        return self._done is not None and not self._done.done()

    @property
    def exited(self) -> bool:
        if not self._exited and self._proc is not None and self._proc.poll() is not None:
            self._on_exit()  # bash is gone, but a background job still holds the pty open
        return self._exited

    async def start(self, timeout: float) -> None:
        """Start bash and wait for its first prompt; failing or cancelled, it leaves nothing."""
        try:
            await self._spawn()
            if not await self.wait(timeout) or self.exited:
                raise ToolError(f"bash did not show a prompt within {timeout:g} seconds")
        except BaseException:
            await self.close()
            raise
        await self.take().finish()  # what bash says while starting is not for the model

    async def _spawn(self) -> None:
        # A few small files once per shell, on the loop: in a thread, a cancelled start could
        # lose track of them.
        self._dir = Path(tempfile.mkdtemp(prefix="terminal-"))
        rcfile, script = self._dir / "rc", self._dir / "command"
        rc = RC.replace("NONCE", self._nonce).replace("SCRIPT", shlex.quote(str(script)))
        rcfile.write_text(rc)
        self._script = os.open(script, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._fd, slave = os.openpty()
        os.set_blocking(self._fd, False)
        _configure_terminal(slave)
        # A session leader that opens a terminal makes it its controlling terminal, which gives
        # bash job control and lets C-c reach the foreground command; `exec` keeps the pid.
        argv = ["bash", "--noprofile", "--norc", "-c",
                'exec bash --noediting --noprofile --rcfile "$2" -i <"$1" >"$1" 2>&1',
                "bash", os.ttyname(slave), str(rcfile)]  # fmt: skip

        def spawn() -> None:
            try:
                self._proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                                              cwd=self.working_dir, env=self._env,
                                              start_new_session=True)  # fmt: skip
            finally:
                os.close(slave)

        self._done = asyncio.get_running_loop().create_future()  # the first prompt ends it
        # Shielded and kept: should this call be cancelled, close() still finds the bash.
        self._spawning = asyncio.ensure_future(run_in_thread(spawn))
        try:
            await asyncio.shield(self._spawning)
        except OSError as e:
            raise ToolError(f"Cannot start bash in {self.working_dir}: {e}") from e
        assert self._proc is not None
        self._reader = asyncio.create_task(self._read())
        # bash's end is seen at once even when a background job keeps the pty open (no EOF).
        with contextlib.suppress(AttributeError, OSError):  # no pidfd: `exited` polls instead
            self._pidfd = os.pidfd_open(self._proc.pid)
            asyncio.get_running_loop().add_reader(self._pidfd, self._on_bash_exit)

    # -- reading ----------------------------------------------------------------------------

    async def _read(self) -> None:
        try:
            while True:
                try:
                    data = os.read(self._fd, 65536)
                except BlockingIOError:
                    await self._ready()
                    continue
                except OSError:  # EIO: no process holds the terminal any more
                    return
                if not data:
                    return
                self._feed(data)
                if self._capture.unsaved_chars > MAX_UNSAVED_CHARS:
                    await self._capture.drain()  # not reading meanwhile makes the writer wait
        finally:
            self._on_exit()

    async def _ready(self, writing: bool = False) -> None:
        """Wait until the pty can be read (or written)."""
        loop = asyncio.get_running_loop()
        add, remove = (loop.add_writer, loop.remove_writer) if writing else (
            loop.add_reader, loop.remove_reader)  # fmt: skip
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        add(self._fd, wake)
        try:
            await ready
        finally:
            remove(self._fd)

    def _feed(self, data: bytes) -> None:
        """Split what was read into output and markers (either may be split between reads)."""
        self.last_output = asyncio.get_running_loop().time()
        buf, self._held = self._held + data, b""
        while buf:
            start = buf.find(self._marker_start)
            if start < 0:
                keep = _split_start(buf, self._marker_start)
                self._emit(buf[: len(buf) - keep])
                self._held = buf[len(buf) - keep :]
                return
            match = self._marker.match(buf, start)
            if match is None and len(buf) - start <= MAX_MARKER_BYTES:  # the rest is to come
                self._emit(buf[:start])
                self._held = buf[start:]
                return
            if match is None:  # not a marker after all
                self._emit(buf[: start + 1])
                buf = buf[start + 1 :]
                continue
            self._emit(buf[:start])
            code, bg, cwd, path = (g.decode(errors="replace") for g in match.groups())
            self.prompt = Prompt(int(code), int(bg or -1), cwd, path)
            self._settle()
            buf = buf[match.end() :]

    def _emit(self, data: bytes) -> None:
        if data:
            self._capture.write(self._cleaner.feed(data))

    def _on_bash_exit(self) -> None:
        """bash ended: take what it printed last, then settle."""
        asyncio.get_running_loop().remove_reader(self._pidfd)
        with contextlib.suppress(OSError):  # nothing more to read, or nobody holds the pty
            for _ in range(16):  # bounded: a background job may still be printing
                self._feed(os.read(self._fd, 65536))
        self._on_exit()

    def _on_exit(self) -> None:
        if not self._exited:
            self._exited = True
            self._settle()

    def _settle(self) -> None:
        """The running command is over: its output goes to whoever waits for it."""
        if self._done is not None and not self._done.done():
            self._capture.write(self._cleaner.flush())
            self._done.set_result(self._capture)
            self._capture = self._new_capture()

    # -- driving ----------------------------------------------------------------------------

    async def submit(self, command: str) -> None:
        """Start a command; the prompt coming back (see `wait`) ends it."""
        assert not self.running
        _configure_terminal(self._fd)  # a program may have left echo on
        # Overwritten in place: a few bytes for the page cache, cheaper than a thread hop.
        # (Truncating to zero first would make ext4 flush the file to disk on every call.)
        data = command.replace("\0", "").encode()
        os.pwrite(self._script, data, 0)
        os.ftruncate(self._script, len(data))
        self._done = asyncio.get_running_loop().create_future()
        await self.send(TRIGGER)

    async def send(self, data: bytes) -> None:
        """Type into the terminal (what a running command reads, or a control key)."""
        while data:
            try:
                data = data[os.write(self._fd, data) :]
            except BlockingIOError:
                await self._ready(writing=True)

    async def wait(self, timeout: float) -> bool:
        """Whether the prompt came back (or the shell ended) within `timeout` seconds."""
        if self._done is None:
            return True
        done, _ = await asyncio.wait([self._done], timeout=max(timeout, 0))
        return bool(done)

    def take(self) -> _Capture:
        """The output since the last take: the finished command's, or what came so far."""
        if self._done is not None and self._done.done():
            captured, self._done = self._done.result(), None
            return captured
        self._capture.write(self._cleaner.flush())
        captured, self._capture = self._capture, self._new_capture()
        return captured

    def kill_foreground(self) -> bool:
        """SIGKILL the foreground process group; False when that is the shell itself."""
        try:
            group = os.tcgetpgrp(self._fd)
        except OSError:
            return False
        if self._proc is None or group == self._proc.pid:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        return True

    async def stop(self, grace: float) -> Stop:
        """Stop the running command as a person would: C-c, then kill what lingers.

        Killing repeats because a killed member of a list (`a; b`) lets bash start the next.
        """
        if self.running:  # C-c at the prompt would print a stray marker
            await self.send(b"\x03")
        if await self.wait(grace):
            return Stop.INTERRUPTED
        for _ in range(KILL_ROUNDS):
            if not self.kill_foreground():
                break
            if await self.wait(min(grace, 1.0)):
                return Stop.KILLED
        return Stop.FAILED

    async def close(self) -> int | None:
        """Kill bash and all it started; bash's exit status (negative: killed by a signal)."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._shutdown())
        # Shielded: a cancelled caller must not leave the shell half closed.
        return await asyncio.shield(self._closing)

    async def _shutdown(self) -> int | None:
        if self._spawning is not None:
            with contextlib.suppress(Exception):  # a failed start: nothing to kill
                await self._spawning
        proc = self._proc
        if proc is not None:
            await run_in_thread(_kill_all, proc.pid, f"{TAG_VARIABLE}={self._nonce}".encode())
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._pidfd >= 0:
            asyncio.get_running_loop().remove_reader(self._pidfd)
        for fd in (self._fd, self._script, self._pidfd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._script = self._pidfd = -1
        self._on_exit()
        await self._capture.finish()  # closes a file that background output may have opened
        if proc is not None:
            await run_in_thread(proc.wait)
        if self._dir is not None:
            await run_in_thread(shutil.rmtree, self._dir, True)
        return proc.returncode if proc is not None else None


def _configure_terminal(fd: int) -> None:
    """No echo (the model knows what it sent), plain \\n line ends, and a window size."""
    attrs = termios.tcgetattr(fd)
    lflag = (attrs[3] | termios.ICANON | termios.ISIG) & ~termios.ECHO
    oflag = attrs[1] & ~termios.ONLCR
    if (lflag, oflag) != (attrs[3], attrs[1]):
        attrs[3], attrs[1] = lflag, oflag
        termios.tcsetattr(fd, termios.TCSANOW, attrs)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", *WINDOW, 0, 0))


def _split_start(buf: bytes, token: bytes) -> int:
    """Length of the end of `buf` that is the beginning of `token` (split between reads)."""
    start = buf.find(token[:1], max(0, len(buf) - len(token) + 1))
    while start >= 0:
        if token.startswith(buf[start:]):
            return len(buf) - start
        start = buf.find(token[:1], start + 1)
    return 0


def _kill_all(leader: int, tag: bytes) -> None:
    """SIGKILL bash and all it started until none is left (a dying process may have forked).
    Blocking (it reads /proc): run in a thread."""
    for _ in range(50):
        victims = _started_by(leader, tag)
        if not victims:
            return
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


def _started_by(leader: int, tag: bytes) -> set[int]:
    """Live processes of the shell: its session, its descendants (also those in a session of
    their own), and any process with its environment tag (daemons that left both).
    """
    parents: dict[int, int] = {}
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        state, ppid, _group, session = stat[stat.rfind(b")") + 2 :].split()[:4]
        if state in (b"Z", b"X"):  # already dead, only waiting for its parent
            continue
        parents[pid] = int(ppid)
        if pid == leader or int(session) == leader or _carries(pid, tag):
            found.add(pid)
    while more := {p for p, pp in parents.items() if pp in found and p not in found}:
        found |= more
    found.discard(os.getpid())
    return found


def _carries(pid: int, tag: bytes) -> bool:
    try:
        return tag in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


# -- the tool -------------------------------------------------------------------------------

Outcome = Literal["done", "silent", "long", "timeout"]


class TerminalTool(Tool):
    name = "terminal"
    description = (
        "Run a bash command in a persistent shell.\n"
        "* One shell per conversation: the working directory, environment variables, "
        "functions and activated virtualenvs carry over between calls.\n"
        "* Chain commands with `&&` or `;`; several lines and heredocs are fine.\n"
        "* Start servers and other long-lived programs in the background with their output "
        "in a file, e.g. `python3 app.py > server.log 2>&1 &`.\n"
        "* A command that prints nothing for a while returns what it printed so far with "
        "exit code -1 and keeps running: send an empty command to wait, text with "
        "is_input=true to answer it, or C-c with is_input=true to stop it. Set `timeout` "
        "for commands expected to be quiet for long.\n"
        "* Output longer than about 30,000 characters is cut in the middle; the whole of it "
        "is saved to a file whose path is given.\n"
        "* Avoid full-screen programs (vim, less, top); use non-interactive flags "
        "(`apt-get -y`, `git --no-pager`)."
    )
    action_type = TerminalAction
    observation_type = TerminalObservation

    def __init__(self, ctx: ToolContext, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(ctx, params)
        self.settings = TerminalParams.model_validate(self.params)
        self._save_dir = ctx.state_dir / "terminal"
        self._shell: Shell | None = None
        self._lock = asyncio.Lock()  # one call at a time drives the shell
        self._notice = ""  # for the next observation: the shell was replaced, and why
        self._saved = False  # some output of this call was saved to a file
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_close: asyncio.Task[None] | None = None
        self._last_used = 0.0

    async def run(self, action: TerminalAction) -> TerminalObservation:
        async with self._lock:
            self._cancel_idle_timer()
            self._saved = False
            try:
                return await self._run(action)
            finally:
                self._arm_idle_timer()

    async def close(self) -> None:
        self._cancel_idle_timer()
        if self._idle_close is not None:
            self._idle_close.cancel()
        # Not under the lock: a call still waiting on its command wakes when the shell ends.
        await self._close_shell()

    # -- one call -----------------------------------------------------------------------------

    async def _run(self, action: TerminalAction) -> TerminalObservation:
        command = action.command
        if action.reset:
            if action.is_input:
                raise ToolError("reset cannot be combined with is_input.")
            await self._close_shell()
            self._notice = f"[The shell was reset: this is a new shell in {self.ctx.working_dir}.]"
        shell = await self._ensure_shell()
        notice, self._notice = self._notice, ""
        if action.is_input:
            if not shell.running:
                return self._error(command, notice, "[Nothing was sent: no command is running. "
                                   "To run this text as a command, send it with is_input=false.]")
            await shell.send(_keys(command))
            return await self._follow(shell, command, action.timeout, notice)
        if shell.running:
            if not command.strip():
                return await self._follow(shell, command, action.timeout, notice)
            return self._error(command, notice, "[Not run: the previous command is still "
                               f"running. {HOW_TO_CONTINUE} Then send this command again.]")
        # What background jobs printed since the last call comes first, marked as theirs.
        earlier = await self._text(shell.take())
        if earlier.strip():
            notice = _join(notice, "[Output of background processes since the last call:]",
                           earlier.rstrip("\n"), "[End of background output.]")  # fmt: skip
        if not command.strip():
            if action.reset:
                return self._observe(shell, None, "", None, prefix=notice)
            return self._error(command, notice, "[No command is running; send one to run.]")
        await shell.submit(command)
        return await self._follow(shell, command, action.timeout, notice)

    async def _ensure_shell(self) -> Shell:
        if self._shell is not None and self._shell.exited:  # it ended between calls
            code = await self._close_shell()
            self._notice = _join(self._notice, f"[The shell had exited (code {code}); this "
                                 f"is a new shell in {self.ctx.working_dir}.]")  # fmt: skip
        if self._shell is None:
            env = {k: v for k, v in os.environ.items() if not k.startswith(WITHHELD_ENV)}
            for name in ("PWD", "OLDPWD", "PS1", "PROMPT_COMMAND"):
                env.pop(name, None)
            env.update({**TERMINAL_ENV, **self.ctx.env, **self.ctx.secrets})
            shell = Shell(self.ctx.working_dir, env, Masker(self.ctx.secrets), self._save_dir,
                          self.settings.max_output_chars)  # fmt: skip
            await shell.start(self.settings.start_timeout)  # closes itself if it fails
            self._shell = shell
        return self._shell

    async def _follow(
        self, shell: Shell, command: str, timeout: float | None, prefix: str
    ) -> TerminalObservation:
        """Wait for the command to end, fall silent or run out of time, and say which."""
        try:
            outcome = await self._wait(shell, timeout or None)
            stop = await shell.stop(self.settings.kill_grace) if outcome == "timeout" else None
        except asyncio.CancelledError:
            await self._abandon(shell)
            raise
        suffix, exit_code = "", -1
        if stop is not None:
            suffix = f"[The command reached its {timeout:g} s timeout; stopped {stop.value}.]"
            if stop is Stop.FAILED:
                await self._close_shell()
                self._notice = f"[This is a new shell in {self.ctx.working_dir}.]"
        output = await self._text(shell.take())
        if shell.exited:
            code = await self._close_shell()  # None: it was closed here, not by itself
            if code is not None:
                suffix = _join(suffix, f"[The shell exited (code {code}); the next command "
                               "starts a new shell.]")  # fmt: skip
                exit_code = code
        elif shell.running:
            said = (f"has printed nothing for {self.settings.no_output_timeout:g} seconds"
                    if outcome == "silent" else f"has run for {self.settings.max_call_seconds:g} "
                    "seconds in this call")  # fmt: skip
            suffix = f"[The command {said} and is still running. {HOW_TO_CONTINUE}]"
        elif shell.prompt is not None:
            exit_code = shell.prompt.exit_code
        return self._observe(shell, command, output, exit_code, timeout=outcome == "timeout",
                             prefix=prefix, suffix=suffix)  # fmt: skip

    async def _wait(self, shell: Shell, timeout: float | None) -> Outcome:
        """Until the command ends, prints nothing for no_output_timeout seconds, has run
        max_call_seconds, or reaches its hard timeout (which replaces the other two: whoever
        sets one expects quiet stretches).
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        while True:
            deadlines: dict[Outcome, float] = (
                {"timeout": start + timeout}
                if timeout is not None
                else {
                    "silent": max(shell.last_output, start) + self.settings.no_output_timeout,
                    "long": start + self.settings.max_call_seconds,
                }
            )
            outcome, deadline = min(deadlines.items(), key=lambda item: item[1])
            left = deadline - loop.time()
            if left <= 0:
                return outcome
            if await shell.wait(left) or shell.exited:
                return "done"

    async def _abandon(self, shell: Shell) -> None:
        """The call was cancelled: stop its command and drop its output; the shell stays."""
        try:
            stop = await shell.stop(self.settings.kill_grace)
        except asyncio.CancelledError:  # cancelled again: no more waiting, just kill
            shell.kill_foreground()
            raise
        if stop is Stop.FAILED:
            await self._close_shell()
            self._notice = "[The shell did not respond to C-c and was replaced by a new one.]"
        else:
            await shell.take().finish()

    async def _text(self, capture: _Capture) -> str:
        text = await capture.finish()
        self._saved = self._saved or capture.path is not None
        return text

    async def _close_shell(self) -> int | None:
        shell, self._shell = self._shell, None
        return await shell.close() if shell is not None else None

    # -- idleness -------------------------------------------------------------------------

    def _arm_idle_timer(self) -> None:
        loop = asyncio.get_running_loop()
        self._last_used = loop.time()
        if self._shell is not None:
            self._idle_timer = loop.call_later(self.ctx.idle_timeout, self._on_idle)

    def _cancel_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _on_idle(self) -> None:
        self._idle_close = asyncio.get_running_loop().create_task(self._close_if_idle())

    async def _close_if_idle(self) -> None:
        async with self._lock:
            idle = asyncio.get_running_loop().time() - self._last_used
            if self._shell is None or idle < self.ctx.idle_timeout:  # used meanwhile
                return
            await self._close_shell()
            self._notice = (
                f"[The previous shell was closed after {self.ctx.idle_timeout:g} seconds "
                f"without use; this is a new shell in {self.ctx.working_dir}: the working "
                "directory, environment variables and background processes of the old one "
                "are gone.]"
            )

    # -- observations -----------------------------------------------------------------------

    def _observe(
        self, shell: Shell, command: str | None, output: str, exit_code: int | None,
        *, timeout: bool = False, prefix: str = "", suffix: str = "",
    ) -> TerminalObservation:  # fmt: skip
        prompt = shell.prompt
        trailer = [f"[Current working directory: {prompt.working_dir}]"] if prompt else []
        if exit_code is not None and exit_code != -1:
            trailer.append(f"[Command finished with exit code {exit_code}]")
        return TerminalObservation(
            content=[TextContent(text=_join(prefix, output.rstrip("\n"), suffix, *trailer))],
            command=command,
            exit_code=exit_code,
            timeout=timeout,
            metadata=CmdOutputMetadata(
                exit_code=-1 if exit_code is None else exit_code,
                pid=prompt.background_pid if prompt else -1,
                username=USERNAME,
                hostname=socket.gethostname(),
                working_dir=prompt.working_dir if prompt else None,
                py_interpreter_path=_python(prompt.path) if prompt else None,
                prefix=prefix,
                suffix=suffix,
            ),
            full_output_save_dir=str(self._save_dir) if self._saved else None,
        )

    def _error(self, command: str, prefix: str, text: str) -> TerminalObservation:
        return TerminalObservation(
            content=[TextContent(text=_join(prefix, text))],
            is_error=True,
            command=command,
            metadata=CmdOutputMetadata(prefix=prefix),
            full_output_save_dir=str(self._save_dir) if self._saved else None,
        )


HOW_TO_CONTINUE = (
    "Send an empty command to wait for more output, text with is_input=true to answer it, "
    "or C-c with is_input=true to stop it."
)


def _keys(text: str) -> bytes:
    """What typing `text` sends: a control key for C-c and the like, else the text and Enter."""
    if re.fullmatch(r"C-[a-zA-Z]", text):
        return bytes([ord(text[2].upper()) - 64])
    return (text + "\n").encode()


def _join(*parts: str) -> str:
    return "\n".join(p for p in parts if p)


def _python(path: str) -> str | None:
    """The interpreter `python` names in the shell (a few stat calls)."""
    return shutil.which("python", path=path) or shutil.which("python3", path=path)


TOOL_SET = single(TerminalTool)
