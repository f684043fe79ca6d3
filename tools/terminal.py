"""terminal: one persistent bash per conversation, driven through a pseudo-terminal.

Why a pty: programs behave as they do for a person (line-buffered output, prompts, C-c), and
bash gets job control, so each foreground command has its own process group that a timeout
can kill while the shell lives on. The event loop reads the pty directly (no tmux server, no
thread per shell), which keeps a round trip to about a millisecond and an idle shell to bash's
own few megabytes.

How a command runs: its text is written to a private file and the shell is typed a fixed
one-line trigger that reads the file and `eval`s it. So heredocs, many-line commands and lines
longer than the terminal's 4 KiB line limit work, and the command is never echoed. The end of a
command is the next prompt: PS1 prints a marker, an ASCII control byte and a random nonce
carrying $?, $!, user, host, $PWD and $PATH. PS1 holds the byte as an octal escape that only
prompt expansion turns into the byte, so printing PS1 or the environment cannot fake a prompt.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import enum
import fcntl
import functools
import os
import re
import shlex
import shutil
import signal
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
from tools.base import (
    Action,
    Observation,
    TextContent,
    Tool,
    ToolContext,
    ToolError,
    run_in_thread,
    single,
)

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
    """Seconds without new output after which a call returns and the command keeps running."""

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
#: Rounds of SIGKILL for a command list whose next member starts after the last was killed.
KILL_ROUNDS = 5
#: Environment variable that tags every process the shell starts, for close() to find.
TAG_VARIABLE = "AGENT_TERMINAL_ID"
SECRET_MASK = "<secret-hidden>"


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
    cut = line.rfind("\r", 0, len(line) - 1)
    return line[cut + 1 :]


class _Cleaner:
    """Turns the terminal's bytes into the text a person would read, one read at a time.

    Stateful because a UTF-8 character, an escape sequence or a line rewritten with carriage
    returns can all be split between two reads.
    """

    def __init__(self, secrets: list[str]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._escape = ""  # the start of an escape sequence whose end has not come yet
        self._line = ""  # the open line: carriage returns may still rewrite it
        # Longest first, so a secret that contains another is masked whole.
        self._secrets = sorted(secrets, key=len, reverse=True)

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
        text = _CONTROL.sub("", text)
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, SECRET_MASK)
        return text


class _Capture:
    """The output behind one observation: head and tail in memory, all of it on disk once it
    is longer than can be shown, so 100 MB of output costs a few tens of kilobytes of memory.
    """

    def __init__(self, limit: int, save_dir: Path) -> None:
        self._half = limit // 2
        self._save_dir = save_dir
        self._head = ""
        self._tail = ""
        self.total = 0
        #: Where the whole output is saved; set once it is too long to show.
        self.path: Path | None = None
        self._unsaved: list[str] = []
        self.unsaved_chars = 0
        self._file: IO[str] | None = None
        self._lock = asyncio.Lock()  # one writer of the file at a time

    def write(self, text: str) -> None:
        if not text:
            return
        self.total += len(text)
        room = self._half - len(self._head)
        if room > 0:
            self._head += text[:room]
        rest = text[max(room, 0) :]
        if self.path is None and self.total > 2 * self._half:
            # Nothing was dropped yet: head and tail still hold everything before `rest`.
            self.path = self._save_dir / f"{ULID()}.txt"
            self._queue(self._head + self._tail + rest)
        elif self.path is not None:
            self._queue(text)
        self._tail = (self._tail + rest)[-self._half :]

    def _queue(self, text: str) -> None:
        self._unsaved.append(text)
        self.unsaved_chars += len(text)

    async def drain(self) -> None:
        """Write what is queued, in a thread: a slow disk must not stall the event loop."""
        async with self._lock:
            if not self._unsaved:
                return
            chunks, self._unsaved, self.unsaved_chars = self._unsaved, [], 0
            await run_in_thread(self._append, chunks)

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
        return (
            f"{self._head}\n[... {cut:,} characters cut here; the whole output "
            f"({self.total:,} characters) is saved in {self.path} ...]\n{self._tail}"
        )


# -- the shell ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    """What bash reported when it came back to its prompt."""

    exit_code: int
    background_pid: int
    username: str
    hostname: str
    working_dir: str
    path: str


class Stop(enum.Enum):
    """How a running command was stopped."""

    INTERRUPTED = "interrupted"  # C-c was enough
    KILLED = "killed"  # its process group was killed
    FAILED = "failed"  # the shell itself does not come back: only closing it helps


class Shell:
    """A bash in its own session on a pty, read by the event loop for as long as it lives.

    A reader always drains the pty, even between calls, so background jobs that print never
    block on a full terminal; what they print waits for the next call.
    """

    def __init__(
        self,
        working_dir: Path,
        env: Mapping[str, str],
        secrets: list[str],
        save_dir: Path,
        max_output_chars: int,
    ) -> None:
        self.working_dir = working_dir
        self._nonce = os.urandom(8).hex()
        self._env = {**env, TAG_VARIABLE: self._nonce}
        self._save_dir = save_dir
        self._limit = max_output_chars
        self._marker_start = b"\x1e" + self._nonce.encode()
        self._marker = re.compile(
            re.escape(self._marker_start)
            + rb"\x1f(\d+)\x1f(\d*)\x1f([^\x1f]*)\x1f([^\x1f]*)\x1f([^\x1f]*)\x1f([^\x1e]*)\x1e"
        )
        self._cleaner = _Cleaner(secrets)
        self._capture = self._new_capture()
        self._held = b""  # the beginning of what may be a marker, split between reads
        self._done: asyncio.Future[_Capture] | None = None
        self._fd = -1
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._pump: asyncio.Task[None] | None = None
        self._closing: asyncio.Future[int | None] | None = None
        self._exited = False
        self.prompt: Prompt | None = None
        #: Loop time of the last bytes read.
        self.last_output = 0.0

    def _new_capture(self) -> _Capture:
        return _Capture(self._limit, self._save_dir)

    @property
    def pid(self) -> int:
        return self._proc.pid if self._proc is not None else -1

    @property
    def running(self) -> bool:
        """A command was sent and its prompt has not come back."""
        return self._done is not None and not self._done.done()

    @property
    def exited(self) -> bool:
        if not self._exited and self._proc is not None and self._proc.poll() is not None:
            # bash is gone but a background job still holds the terminal open (no EOF).
            self._on_exit()
        return self._exited

    async def start(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        self._dir = Path(await run_in_thread(tempfile.mkdtemp, "", "terminal-"))
        rcfile = self._dir / "rc"
        # PROMPT_COMMAND sets PS1 afresh before each prompt, so whoever changed PS1 meanwhile
        # (a virtualenv's activate, conda, the model) cannot hide the marker.
        fields = r"\037".join(["$?", "$!", r"\u", r"\h", "$PWD", "$PATH"])
        rc = (
            f"__agent_prompt() {{ PS1='\\036{self._nonce}\\037{fields}\\036'; }}\n"
            "PROMPT_COMMAND=__agent_prompt\nPS2=\nset +o history\nunset HISTFILE\n"
        )
        await run_in_thread(rcfile.write_text, rc)
        master, slave = os.openpty()
        _configure_terminal(slave)
        # A session leader opening a terminal makes it its controlling terminal; that is what
        # gives bash job control and lets C-c reach the foreground command. The redirection
        # opens it by name, then exec keeps the pid (still the session leader).
        argv = [
            "bash", "--noprofile", "--norc", "-c",
            'exec bash --noediting --noprofile --rcfile "$2" -i <"$1" >"$1" 2>&1',
            "bash", os.ttyname(slave), str(rcfile),
        ]  # fmt: skip
        popen = functools.partial(
            subprocess.Popen,
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=self.working_dir,
            env=self._env,
            start_new_session=True,
        )
        self._fd = master
        os.set_blocking(master, False)
        self._done = loop.create_future()  # resolved by the first prompt
        try:
            self._proc = await run_in_thread(popen)
        except OSError as e:
            os.close(master)
            await run_in_thread(shutil.rmtree, self._dir, True)
            raise ToolError(f"Cannot start bash in {self.working_dir}: {e}") from e
        finally:
            os.close(slave)
        self._pump = asyncio.create_task(self._read())
        if not await self.wait(timeout) or self.exited:
            await self.close()
            raise ToolError(f"bash did not show a prompt within {timeout:g} seconds")
        await self.take().finish()  # whatever bash said while starting is not for the model

    # -- reading ----------------------------------------------------------------------------

    async def _read(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                await self._ready()
                continue
            except OSError:  # EIO: no process holds the terminal any more
                break
            if not data:
                break
            self._feed(data)
            if self._capture.unsaved_chars > MAX_UNSAVED_CHARS:
                await self._capture.drain()  # not reading meanwhile makes the writer wait
        self._on_exit()

    async def _ready(self, writing: bool = False) -> None:
        """Wait until the pty can be read (or written)."""
        loop = asyncio.get_running_loop()
        add, remove = (loop.add_writer, loop.remove_writer) if writing else (
            loop.add_reader, loop.remove_reader)  # fmt: skip
        ready: asyncio.Future[None] = loop.create_future()
        add(self._fd, lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            remove(self._fd)

    def _feed(self, data: bytes) -> None:
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
            if match is None:
                if len(buf) - start <= MAX_MARKER_BYTES:  # the rest of it is still to come
                    self._emit(buf[:start])
                    self._held = buf[start:]
                    return
                self._emit(buf[: start + 1])  # not a marker after all
                buf = buf[start + 1 :]
                continue
            self._emit(buf[:start])
            self._on_prompt(match)
            buf = buf[match.end() :]

    def _emit(self, data: bytes) -> None:
        if data:
            self._capture.write(self._cleaner.feed(data))

    def _on_prompt(self, match: re.Match[bytes]) -> None:
        code, bg, user, host, cwd, path = (g.decode(errors="replace") for g in match.groups())
        self.prompt = Prompt(int(code), int(bg or -1), user, host, cwd, path)
        self._settle()

    def _on_exit(self) -> None:
        if not self._exited:
            self._exited = True
            self._settle()

    def _settle(self) -> None:
        """The running command is over: its capture goes to whoever waits for it."""
        if self._done is not None and not self._done.done():
            self._capture.write(self._cleaner.flush())
            self._done.set_result(self._capture)
            self._capture = self._new_capture()

    # -- driving ----------------------------------------------------------------------------

    async def submit(self, command: str) -> None:
        """Start a command; the prompt coming back (see `wait`) ends it."""
        assert self._dir is not None and not self.running
        _configure_terminal(self._fd)  # a program may have left echo on
        script = self._dir / "command"
        # A few bytes for the page cache: a thread hop would cost more than the write.
        script.write_text(command.replace("\0", ""), encoding="utf-8")
        self._done = asyncio.get_running_loop().create_future()
        # `builtin`, so a function the model named `read` or `eval` cannot break the trigger.
        trigger = f"IFS= builtin read -r -d '' __agent_cmd <{shlex.quote(str(script))};"
        await self.send(f'{trigger} builtin eval "$__agent_cmd"\n'.encode())

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
            captured = self._done.result()
            self._done = None
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
        if group == self.pid:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        return True

    async def stop(self, grace: float) -> Stop:
        """Stop the running command as a person would: C-c, then kill what lingers.

        Killing repeats because a killed member of a list (`a; b`) lets bash start the next.
        """
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
        """Kill bash and all it started; the exit status of bash (negative: killed by us)."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._shutdown())
        # Shielded: a cancelled caller must not leave the shell half closed.
        return await asyncio.shield(self._closing)

    async def _shutdown(self) -> int | None:
        proc = self._proc
        if proc is not None:
            await run_in_thread(_kill_all, proc.pid, f"{TAG_VARIABLE}={self._nonce}".encode())
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._on_exit()
        await self._capture.finish()  # closes a file that background output may have opened
        if proc is not None:
            await run_in_thread(proc.wait)
        if self._dir is not None:
            await run_in_thread(shutil.rmtree, self._dir, True)
        return proc.returncode if proc is not None else None


def _configure_terminal(fd: int) -> None:
    """No echo (the model knows what it sent) and plain \\n line ends; a sane window size."""
    attrs = termios.tcgetattr(fd)
    lflag = attrs[3] | termios.ICANON | termios.ISIG
    oflag = attrs[1] & ~termios.ONLCR
    if (lflag & ~termios.ECHO, oflag) != (attrs[3], attrs[1]):
        attrs[3], attrs[1] = lflag & ~termios.ECHO, oflag
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
    """SIGKILL bash and all it started, until none is left (a dying process may have forked).

    Blocking (it reads /proc): run in a thread.
    """
    for _ in range(50):
        victims = _started_by(leader, tag)
        if not victims:
            return
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


def _started_by(leader: int, tag: bytes) -> set[int]:
    """Live processes of the shell: its session, its descendants (also those that made a
    session of their own), and any process carrying its environment tag (daemons that left
    both, with `setsid` or a double fork).
    """
    parents: dict[int, int] = {}
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
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
        with open(f"/proc/{pid}/environ", "rb") as f:
            return tag in f.read()
    except OSError:
        return False


# -- the tool -------------------------------------------------------------------------------


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
        self._shell: Shell | None = None
        self._lock = asyncio.Lock()  # one call at a time drives the shell
        self._notice = ""  # said at the start of the next observation (a shell was replaced)
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_close: asyncio.Task[None] | None = None
        self._last_used = 0.0

    async def run(self, action: TerminalAction) -> TerminalObservation:
        async with self._lock:
            self._cancel_idle_timer()
            try:
                return await self._run(action)
            finally:
                self._arm_idle_timer()

    async def close(self) -> None:
        self._cancel_idle_timer()
        if self._idle_close is not None:
            self._idle_close.cancel()
        # Not under the lock: a call still waiting on its command wakes up when the shell ends.
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
                return self._error(
                    command,
                    "[Nothing was sent: no command is running. To run this text as a command, "
                    "send it with is_input=false.]",
                    notice,
                )
            await shell.send(_keys(command))
            return await self._follow(shell, command, action.timeout, notice)
        if not command.strip():
            if shell.running:
                return await self._follow(shell, command, action.timeout, notice)
            if action.reset:
                return self._observe(shell, None, "", prefix=notice)
            earlier = await shell.take().finish()
            text = "[No command is running; send a command to run.]"
            return self._error(command, text, _join(notice, _background(earlier)))
        if shell.running:
            return self._error(
                command,
                "[Not run: the previous command is still running. Send an empty command to "
                "wait for its output, text with is_input=true to answer it, or C-c with "
                "is_input=true to stop it; then run this command again.]",
                notice,
            )
        earlier = await shell.take().finish()  # what background jobs printed since last time
        await shell.submit(command)
        return await self._follow(shell, command, action.timeout, _join(notice, _background(earlier)))

    async def _ensure_shell(self) -> Shell:
        shell = self._shell
        if shell is not None and shell.exited:  # it ended between calls
            code = await self._close_shell()
            self._notice = _join(
                self._notice,
                f"[The shell had exited (code {code}); this is a new shell in "
                f"{self.ctx.working_dir}.]",
            )
            shell = None
        if shell is None:
            shell = Shell(
                self.ctx.working_dir,
                self._environment(),
                [v for v in self.ctx.secrets.values() if len(v) >= 3],
                self.ctx.state_dir / "terminal",
                self.settings.max_output_chars,
            )
            await shell.start(self.settings.start_timeout)
            self._shell = shell
        return shell

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(WITHHELD_ENV)}
        for name in ("PWD", "OLDPWD", "PS1", "PROMPT_COMMAND"):
            env.pop(name, None)
        return {**env, **TERMINAL_ENV, **self.ctx.env, **self.ctx.secrets}

    async def _follow(
        self, shell: Shell, command: str, timeout: float | None, prefix: str
    ) -> TerminalObservation:
        """Wait for the command to end, fall silent or run out of time; say which."""
        try:
            outcome = await self._wait(shell, timeout or None)
        except asyncio.CancelledError:
            await self._abandon(shell)
            raise
        suffix = ""
        if outcome == "timeout":
            stop = await shell.stop(self.settings.kill_grace)
            how = {Stop.INTERRUPTED: "with C-c", Stop.KILLED: "by killing it (it ignored C-c)"}
            if stop is Stop.FAILED:
                output = await shell.take().finish()
                await self._close_shell()
                suffix = (
                    f"[The command reached its {timeout:g} second timeout and the shell did not "
                    "respond to C-c, so it was killed; the next command starts a new shell.]"
                )
                return self._observe(shell, command, output, exit_code=-1, timeout=True,
                                     prefix=prefix, suffix=suffix)  # fmt: skip
            suffix = f"[The command reached its {timeout:g} second timeout and was stopped {how[stop]}.]"
        if shell.exited:
            output = await shell.take().finish()
            code = await self._close_shell()
            suffix = _join(suffix, f"[The shell exited (code {code}); the next command starts a new shell.]")
            return self._observe(shell, command, output, exit_code=code if code is not None else -1,
                                 timeout=outcome == "timeout", prefix=prefix, suffix=suffix)  # fmt: skip
        output = await shell.take().finish()
        if shell.running:  # fell silent
            suffix = (
                f"[The command has printed nothing for {self.settings.no_output_timeout:g} "
                "seconds and is still running. Send an empty command to wait for more output, "
                "text with is_input=true to answer it, or C-c with is_input=true to stop it.]"
            )
            return self._observe(shell, command, output, exit_code=-1, prefix=prefix, suffix=suffix)
        assert shell.prompt is not None
        return self._observe(shell, command, output, exit_code=shell.prompt.exit_code,
                             timeout=outcome == "timeout", prefix=prefix, suffix=suffix)  # fmt: skip

    async def _wait(self, shell: Shell, timeout: float | None) -> str:
        """'done', 'silent' (no output for no_output_timeout seconds) or 'timeout'.

        A hard timeout replaces the silence rule: whoever sets one expects quiet stretches.
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        while True:
            now = loop.time()
            if timeout is not None:
                left = start + timeout - now
                if left <= 0:
                    return "timeout"
            else:
                left = max(shell.last_output, start) + self.settings.no_output_timeout - now
                if left <= 0:
                    return "done" if shell.exited else "silent"
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
                f"[The previous shell was closed after {self.ctx.idle_timeout:g} seconds without "
                f"use; this is a new shell in {self.ctx.working_dir}: the working directory, "
                "environment variables and background processes of the old one are gone.]"
            )

    async def _close_shell(self) -> int | None:
        shell, self._shell = self._shell, None
        return await shell.close() if shell is not None else None

    # -- observations -----------------------------------------------------------------------

    def _observe(
        self,
        shell: Shell,
        command: str | None,
        output: str,
        *,
        exit_code: int | None = None,
        timeout: bool = False,
        prefix: str = "",
        suffix: str = "",
    ) -> TerminalObservation:
        prompt = shell.prompt
        metadata = CmdOutputMetadata(exit_code=-1 if exit_code is None else exit_code,
                                     prefix=prefix, suffix=suffix)  # fmt: skip
        trailer = ""
        if prompt is not None:
            metadata.pid = prompt.background_pid
            metadata.username, metadata.hostname = prompt.username, prompt.hostname
            metadata.working_dir = prompt.working_dir
            metadata.py_interpreter_path = _python(prompt.path)
            trailer = f"[Current working directory: {prompt.working_dir}]"
        if exit_code is not None and exit_code != -1:
            trailer = _join(trailer, f"[Command finished with exit code {exit_code}]")
        saved = re.search(r"is saved in (\S+) \.\.\.\]", output)
        return TerminalObservation(
            content=[TextContent(text=_join(prefix, output.rstrip("\n"), suffix, trailer))],
            command=command,
            exit_code=exit_code,
            timeout=timeout,
            metadata=metadata,
            full_output_save_dir=str(Path(saved.group(1)).parent) if saved else None,
        )

    def _error(self, command: str, text: str, prefix: str = "") -> TerminalObservation:
        return TerminalObservation(
            content=[TextContent(text=_join(prefix, text))],
            is_error=True,
            command=command,
            metadata=CmdOutputMetadata(prefix=prefix),
        )


def _keys(text: str) -> bytes:
    """What typing `text` sends: a control key for C-c and the like, else the text and Enter."""
    if re.fullmatch(r"C-[a-zA-Z]", text):
        return bytes([ord(text[2].upper()) - 64])
    return (text + "\n").encode()


def _background(output: str) -> str:
    if not output.strip():
        return ""
    return f"[Output of background processes since the last call:]\n{output.rstrip()}\n[End of it.]"


def _join(*parts: str) -> str:
    return "\n".join(p for p in parts if p)


def _python(path: str) -> str | None:
    """The interpreter `python` names in the shell (a few stat calls)."""
    return shutil.which("python", path=path) or shutil.which("python3", path=path)


TOOL_SET = single(TerminalTool)
