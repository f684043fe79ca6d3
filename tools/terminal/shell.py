"""The shell: one bash in its own session on a pty, read by the event loop."""

from __future__ import annotations

import asyncio
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from core.masking import Masker
from core.processes import kill_tree, oom_first, signal_group
from tools.base import ToolError, run_in_thread
from tools.terminal.output import Capture, Cleaner

# -- tuning that is no one's business but this module's -----------------------------------

#: Rows and columns reported to programs that ask.
WINDOW = (50, 200)
#: Output not yet on disk beyond which the reader waits for the disk (and so does the shell).
MAX_UNSAVED_CHARS = 1 << 20
#: A marker is short; a marker start followed by this much without an end was not one.
MAX_MARKER_BYTES = 64 * 1024
#: Rounds of SIGKILL for a command list whose next member starts once the last is killed.
KILL_ROUNDS = 5
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
        self._new_capture = functools.partial(Capture, max_output_chars, save_dir)
        self._marker_start = b"\x1e" + self._nonce.encode()
        self._marker = re.compile(
            re.escape(self._marker_start) + rb"\x1f(\d+)\x1f(\d*)\x1f([^\x1f]*)\x1f([^\x1e]*)\x1e"
        )
        self._cleaner = Cleaner(masker)
        self._capture = self._new_capture()
        self._held = b""  # the beginning of what may be a marker, split between reads
        self._done: asyncio.Future[Capture] | None = None  # the running command's end
        self._fd = self._script = self._pidfd = -1  # pty, command file, bash's pidfd
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._spawning: asyncio.Future[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._closing: asyncio.Future[int | None] | None = None
        self._exited = False
        self.prompt: Prompt | None = None
        self.last_output = 0.0  # loop time of the last bytes read
        #: Told each piece of the running command's output (cleaned and masked) as it comes.
        self.on_output: Callable[[str], None] | None = None

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
        # `env --default-signal` first: a server started in the background by a script ignores
        # SIGINT, every command would inherit that, and C-c would stop none of them. Its
        # commands go before the server when memory runs out (`oom_first`).
        command = 'exec bash --noediting --noprofile --rcfile "$2" -i <"$1" >"$1" 2>&1'
        argv = oom_first(
            ["env", "--default-signal", "bash", "--noprofile", "--norc", "-c", command,
             "bash", os.ttyname(slave), str(rcfile)],
            self.working_dir,
            self._env,
        )  # fmt: skip

        def spawn() -> None:
            # The shell starts with no signal blocked, whatever this thread inherited (a
            # thread of a server's pool may block SIGINT): else C-c could reach no command.
            blocked = signal.pthread_sigmask(signal.SIG_SETMASK, ())
            try:
                self._proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                                              cwd=self.working_dir, env=self._env,
                                              start_new_session=True)  # fmt: skip
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
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
            text = self._cleaner.feed(data)
            self._capture.write(text)
            if text and self.on_output is not None:
                self.on_output(text)

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

    def take(self) -> Capture:
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
        signal_group(group, signal.SIGKILL)
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
            await run_in_thread(kill_tree, proc.pid, f"{TAG_VARIABLE}={self._nonce}".encode())
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
