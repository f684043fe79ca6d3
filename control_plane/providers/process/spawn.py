"""Starting a sandbox's first process: in a session of its own, with data on its descriptors.

Spawned without a Popen object on purpose: a sandbox outlives the control plane (the next one
adopts it), so nothing here may own, wait for or warn about its lifetime. Every other
descriptor of this process is close-on-exec: Python opens its own so, and those this process
inherited are made so before a spawn (bubblewrap passes on whatever it is given, and its pid 1
is readable inside the sandbox).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select

#: Descriptors a spawned process may be given data on are below this.
LOW_FDS = 64
#: What a pipe holds before its writer would block (Linux's default, never less).
PIPE_BYTES = 64 * 1024


def spawn(
    argv: list[str],
    env: dict[str, str],
    *,
    output: int,
    stdin: bytes | int = b"",
    files: dict[int, bytes] | None = None,
) -> int:
    """`argv` in a new session, its pid. `stdin` bytes come through a pipe, written and closed
    before it starts (so once read it is gone: nobody finds it again through /proc/<pid>/fd),
    or it is a descriptor of ours; each of `files` is a memory file on the descriptor its key
    names (data that is no secret, of any size); stdout and stderr go to `output`."""
    with contextlib.ExitStack() as stack:

        def above(fd: int) -> int:
            """`fd` moved above every target, so no action overwrites another's source."""
            moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, LOW_FDS)
            stack.callback(os.close, moved)
            return moved

        if isinstance(stdin, int):
            source = above(stdin)
        else:
            read = filled_pipe(stdin)
            try:
                source = above(read)
            finally:
                os.close(read)
        actions = [
            (os.POSIX_SPAWN_DUP2, source, 0),
            (os.POSIX_SPAWN_DUP2, above(output), 1),
            (os.POSIX_SPAWN_DUP2, above(output), 2),
        ]
        for target, data in (files or {}).items():
            if not 2 < target < LOW_FDS:
                raise ValueError(f"descriptor {target}: files go on 3 to {LOW_FDS - 1}")
            memory = os.memfd_create(f"fd{target}", os.MFD_CLOEXEC)
            try:
                with os.fdopen(os.dup(memory), "wb") as out:
                    out.write(data)
                os.lseek(memory, 0, os.SEEK_SET)
                source = above(memory)
            finally:
                os.close(memory)
            actions.append((os.POSIX_SPAWN_DUP2, source, target))
        _seal_inherited()
        return os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)


def filled_pipe(data: bytes) -> int:
    """The read end of a pipe holding `data`, its write end closed."""
    if len(data) > PIPE_BYTES:
        raise ValueError(f"at most {PIPE_BYTES} bytes go through a pipe")
    read, write = os.pipe()
    try:
        os.write(write, data)
    finally:
        os.close(write)
    return read


def _seal_inherited() -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            with contextlib.suppress(OSError):  # the listing's own descriptor, now closed
                if os.get_inheritable(fd):
                    os.set_inheritable(fd, False)


def wait(pid: int, timeout: float) -> int | None:
    """The exit status of our child `pid` within `timeout` seconds (None: still running)."""
    fd = os.pidfd_open(pid)
    try:
        if not select.select([fd], [], [], timeout)[0]:
            return None
    finally:
        os.close(fd)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
