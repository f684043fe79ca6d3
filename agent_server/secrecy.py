"""The server's own keys, kept from what it runs.

Everything the server starts (the agent's terminal, `/api/bash`, `/commands`, hooks, MCP servers,
ACP agents) runs as the server's own user and never inherits its keys (`core.processes.child_env`).
Two doors would still open them to such a child:

- `/proc/<server pid>/environ` is the environment the server was *started* with, whatever
  `os.environ` says later, and `/proc/<pid>/mem` or ptrace read the rest of its memory. Made
  non-dumpable (`PR_SET_DUMPABLE` 0, the kernel's rule for setuid programs), the server's /proc
  files belong to root and a process of the same uid may not ptrace it: a non-root child reads
  nothing. Root still can; a sandbox runs its server as a user of its own for that reason.
- A launcher's environment: bubblewrap's pid 1 and a container's tini hold the environment they
  pass on, readable as `/proc/1/environ` inside the sandbox. So a launcher hands the keys over a
  pipe instead (`AGENT_SERVER_KEYS_FD`: a JSON object of variable names to values, read to its
  end here; its codec is `launch.keys`, the launchers' too): no launcher's environment, argv
  or file ever holds them.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import MutableMapping

from agent_server.config import ConfigError
from launch import keys as launch_keys
from launch.env import KEYS_FD
from launch.keys import MAX_BYTES

PR_SET_DUMPABLE = 4


def guard(environ: MutableMapping[str, str] | None = None) -> None:
    """First thing at start: no dumps, then the keys from their pipe (when one is named)."""
    undumpable()
    receive_keys(os.environ if environ is None else environ)


def undumpable() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"prctl(PR_SET_DUMPABLE): {os.strerror(error)}")


def receive_keys(environ: MutableMapping[str, str]) -> None:
    """Reads the pipe `AGENT_SERVER_KEYS_FD` names to its end and puts its keys into `environ`
    (so the configuration reads them as from the environment); the descriptor is closed, or
    pointed at /dev/null when it is one of the standard three."""
    named = environ.pop(KEYS_FD, None)
    if not named:
        return
    try:
        fd = int(named)
        if fd < 0:
            raise ValueError
    except ValueError:
        raise ConfigError(f"{KEYS_FD}={named!r}: not a file descriptor") from None
    try:
        data = _read(fd)
    except OSError as exc:
        raise ConfigError(f"{KEYS_FD}={fd}: cannot read the keys: {exc.strerror}") from None
    finally:
        _release(fd)
    try:
        keys = launch_keys.decode(data)
    except ValueError:
        raise ConfigError(
            f"{KEYS_FD}={fd}: expected a JSON object of SESSION_API_KEY / "
            "AGENT_SERVER_WEBHOOK_* / AGENT_SERVER_NETWORK_* strings"
        ) from None
    for name, value in keys.items():
        environ[name] = value


def _read(fd: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := os.read(fd, MAX_BYTES + 1 - size):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BYTES:
            raise OSError(0, f"more than {MAX_BYTES} bytes")
    return b"".join(chunks)


def _release(fd: int) -> None:
    if fd > 2:
        try:
            os.close(fd)
        except OSError:
            pass
        return
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)
