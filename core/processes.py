"""Child processes: a clean environment, a bounded run, and nothing left behind.

Every process runs in a session of its own, so its whole process group can be signalled at
once. A group is not enough, though: a child can leave it (`setsid`, a daemon's double fork).
So each run also carries a random tag in its environment, and when it ends /proc is swept
for anything in its session, below it, or carrying the tag, until none is left.

This module starts, signals and ends; what it knows of the processes there are it reads
through `core.procfs` (Linux-only, as the servers are). Those readers are named here too
(`processes.state`, `processes.children`, ...): a caller that runs processes also asks
after them, and reaches both through one module.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
import shutil
import signal
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.procfs import (
    ProcessInfo,
    children,
    find_process,
    group_members,
    holds_group,
    is_running,
    list_processes,
    parse_stat,
    process_info,
    start_time,
    started_by,
    state,
    with_argument,
    with_environment,
)

#: Bytes read from a pipe at a time.
CHUNK = 64 * 1024
#: Each of stdout and stderr of a run is kept up to this many bytes unless told otherwise.
MAX_OUTPUT_BYTES = 100_000
#: Marks the processes a run started, to find those that left its session.
TAG_VARIABLE = "AGENT_SERVER_RUN_TAG"
#: Prefixes of the servers' own variables (their keys, their settings), never inherited.
WITHHELD_ENV = ("SESSION_API_KEY", "AGENT_SERVER_", "CONTROL_PLANE_")
#: The server's own place (PWD), its prompt, and Git variables that would point Git at the
#: server's repository instead of the child's.
DROPPED_ENV = (
    "PWD",
    "OLDPWD",
    "PS1",
    "PROMPT_COMMAND",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_COMMON_DIR",
)
#: No pager, no colours, no prompt: nobody is at a terminal to answer.
QUIET_ENV = {
    "TERM": "dumb",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
}
#: Rounds of the sweep: a process being killed may fork once more.
SWEEP_ROUNDS = 50
#: Seconds a group gets between SIGTERM and SIGKILL.
TERM_GRACE = 1.0
#: What a child adds to its OOM score (of -1000 to 1000): past its sandbox's memory, the kernel
#: ends the agent's processes before the server that runs them, even where each is smaller
#: than the server (a build's many compilers). Raising one's own score needs no privilege.
CHILD_OOM_SCORE_ADJ = b"500"


#: What `oom_first` runs first: a shell that raises its own score, then becomes the program.
OOM_FIRST = (
    "/bin/sh",
    "-c",
    f'echo {CHILD_OOM_SCORE_ADJ.decode()} >/proc/self/oom_score_adj 2>/dev/null; exec "$0" "$@"',
)


def oom_first(argv: Sequence[str], cwd: Path | str, env: Mapping[str, str]) -> list[str]:
    """`argv`, run so that it and whatever it starts go before the server when memory runs
    out. The child cannot be given its score from here: before its exec it is the server's
    copy, as undumpable as the server (its /proc files are root's), and made dumpable even a
    moment it would show the server's memory to the sandbox's other processes; set after the
    exec, what it started at once would have escaped. Raises FileNotFoundError, as starting
    it would, when the program is not there (the shell would only exit 127)."""
    program = argv[0]
    if "/" in program:
        found = os.access(Path(cwd, program), os.X_OK) and Path(cwd, program).is_file()
    else:
        found = shutil.which(program, path=env.get("PATH", os.defpath)) is not None
    if not found:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    return [*OOM_FIRST, *argv]


# -- environment -----------------------------------------------------------------------------


def child_env(*layers: Mapping[str, str], quiet: bool = True) -> dict[str, str]:
    """The server's environment without its own secrets, then QUIET_ENV (unless `quiet` is
    False: an interactive shell may let a prompt be answered), then each layer over it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(WITHHELD_ENV)}
    for name in DROPPED_ENV:
        env.pop(name, None)
    if quiet:
        env.update(QUIET_ENV)
    for layer in layers:
        env.update(layer)
    return env


# -- killing ---------------------------------------------------------------------------------


def signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group that may already be gone (or never ours to signal); False then."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_tree(leader: int, tag: bytes) -> None:
    """SIGKILL the leader and all it started until none is left (a dying process may have
    forked). Blocking (it reads /proc): run it in a thread."""
    for _ in range(SWEEP_ROUNDS):
        victims = started_by(leader, tag)
        if not victims:
            return
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


#: asyncio's own limit of a subprocess stream's buffer (`create_subprocess_exec`'s `limit`).
STREAM_LIMIT = 64 * 1024


class _Exits(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's protocol for a process's streams, which also says when the process exits:
    the loop's child watcher tells it (`process_exited`) as soon as it has, whatever still
    holds its pipes."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exit: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exit.done():
            self.exit.set_result(None)


#: The exit of each process `start_process` started (forgotten with the process).
_EXITS: weakref.WeakKeyDictionary[asyncio.subprocess.Process, asyncio.Future[None]] = (
    weakref.WeakKeyDictionary()
)


async def start_process(program: str, *args: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """`asyncio.create_subprocess_exec` (the same arguments), for a process whose exit
    `exited` waits for."""
    loop = asyncio.get_running_loop()
    exits = _Exits(limit=STREAM_LIMIT, loop=loop)
    transport, _ = await loop.subprocess_exec(lambda: exits, program, *args, **kwargs)
    proc = asyncio.subprocess.Process(transport, exits, loop)
    _EXITS[proc] = exits.exit
    return proc


async def exited(proc: asyncio.subprocess.Process) -> int:
    """The exit status of a process `start_process` started, once it has exited, whatever
    still holds its pipes.

    asyncio's own `wait()` (Python 3.11's event loop) returns only once every pipe of the
    process is closed too, so a finished command whose background child (`sleep 30 &`) holds
    its stdout was waited for as long as that child ran (uvloop's did not wait for them). A
    process started otherwise is waited for as asyncio waits."""
    exit = _EXITS.get(proc)
    if exit is None:
        return await proc.wait()
    await asyncio.shield(exit)
    while proc.returncode is None:  # told with it on asyncio's loop; a moment after on others
        await asyncio.sleep(0.001)
    return proc.returncode


async def end_group(proc: asyncio.subprocess.Process, tag: str) -> None:
    """SIGTERM the process's group, SIGKILL what is left a moment later; then sweep for what
    it started elsewhere (other groups, other sessions). `proc` must lead its own session."""
    pgid = proc.pid  # start_new_session: the leader's pid is the group's id
    signal_group(pgid, signal.SIGTERM)
    try:
        await asyncio.wait_for(asyncio.shield(exited(proc)), TERM_GRACE)
    except TimeoutError:
        pass
    signal_group(pgid, signal.SIGKILL)
    await exited(proc)
    await asyncio.to_thread(kill_tree, proc.pid, f"{TAG_VARIABLE}={tag}".encode())


# -- running ---------------------------------------------------------------------------------


@dataclass
class Output:
    """The head of one output stream and how many bytes there were in all."""

    head: bytes
    total: int


@dataclass
class Finished:
    """How a run ended; `exit_code` is negative when a signal ended it."""

    exit_code: int
    stdout: Output
    stderr: Output
    timed_out: bool


async def run_process(
    argv: list[str],
    cwd: Path | str,
    env: Mapping[str, str],
    timeout: float,
    keep: int = MAX_OUTPUT_BYTES,
    *,
    stdin: bytes | None = None,
    on_output: Callable[[int, bytes], None] | None = None,
) -> Finished:
    """Run to completion or timeout, keeping the first `keep` bytes of each output; whatever
    it started is killed when it ends, also when the caller is cancelled.

    `stdin` is written to the process (a process that exits without reading it is fine);
    without it, stdin is /dev/null. `on_output(stream, chunk)` is told every chunk as it is
    read (stream 0: stdout, 1: stderr), for a caller that reports output before the end.
    Raises OSError when the process cannot start.
    """
    tag = secrets.token_hex(8)
    proc = await start_process(
        *oom_first(argv, cwd, env),
        cwd=cwd,
        env={**env, TAG_VARIABLE: tag},
        stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    sinks = [_Sink(), _Sink()]
    tasks = [
        asyncio.create_task(_collect(proc.stdout, keep, sinks[0], on_output, 0)),
        asyncio.create_task(_collect(proc.stderr, keep, sinks[1], on_output, 1)),
    ]
    if stdin is not None:
        assert proc.stdin is not None
        tasks.append(asyncio.create_task(_feed(proc.stdin, stdin)))
    timed_out = False
    try:
        try:
            await asyncio.wait_for(exited(proc), timeout)
        except TimeoutError:
            timed_out = True
    finally:
        await end_group(proc, tag)
    # Whatever still held a pipe is dead now; what was read so far is kept either way.
    await asyncio.wait(tasks, timeout=2)
    for task in tasks:
        task.cancel()
    assert proc.returncode is not None
    out, err = (Output(bytes(sink.head), sink.total) for sink in sinks)
    return Finished(proc.returncode, out, err, timed_out)


async def stream_process(
    argv: list[str], cwd: Path | str, env: Mapping[str, str], timeout: float
) -> AsyncIterator[bytes]:
    """A process's stdout as it comes (stderr dropped), bounded by a timeout like run_process;
    closing the iterator early ends the process too."""
    tag = secrets.token_hex(8)
    proc = await start_process(
        *oom_first(argv, cwd, env),
        cwd=cwd,
        env={**env, TAG_VARIABLE: tag},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    assert proc.stdout is not None
    deadline = asyncio.get_running_loop().time() + timeout
    try:
        while True:
            # A deadline per read, not a timeout scope: this generator is suspended in between.
            left = deadline - asyncio.get_running_loop().time()
            try:
                chunk = await asyncio.wait_for(proc.stdout.read(CHUNK), max(left, 0))
            except TimeoutError:
                return
            if not chunk:
                return
            yield chunk
    finally:
        await end_group(proc, tag)


@dataclass
class _Sink:
    head: bytearray = field(default_factory=bytearray)
    total: int = 0


async def _collect(
    stream: asyncio.StreamReader,
    keep: int,
    sink: _Sink,
    on_output: Callable[[int, bytes], None] | None = None,
    index: int = 0,
) -> None:
    """Read to the end, keeping the head in `sink` (kept too if the reader is cancelled)."""
    while chunk := await stream.read(CHUNK):
        if on_output is not None:
            on_output(index, chunk)
        sink.total += len(chunk)
        if len(sink.head) < keep:
            sink.head += chunk[: keep - len(sink.head)]


async def _feed(pipe: asyncio.StreamWriter, data: bytes) -> None:
    try:
        if not pipe.is_closing():
            pipe.write(data)
            await pipe.drain()
        pipe.close()
    except (BrokenPipeError, ConnectionResetError, RuntimeError):
        pass  # the process exited without reading all of it: its business


__all__ = [
    "CHUNK",
    "DROPPED_ENV",
    "MAX_OUTPUT_BYTES",
    "OOM_FIRST",
    "QUIET_ENV",
    "TAG_VARIABLE",
    "WITHHELD_ENV",
    "Finished",
    "Output",
    "ProcessInfo",
    "child_env",
    "children",
    "end_group",
    "exited",
    "start_process",
    "find_process",
    "group_members",
    "holds_group",
    "is_running",
    "kill_tree",
    "list_processes",
    "oom_first",
    "parse_stat",
    "process_info",
    "run_process",
    "signal_group",
    "start_time",
    "started_by",
    "state",
    "stream_process",
    "with_argument",
    "with_environment",
]
