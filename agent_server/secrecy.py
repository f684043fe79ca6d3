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
  end here): no launcher's environment, argv or file ever holds them.
"""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import MutableMapping
from typing import Literal

from pydantic import TypeAdapter

from agent_server.config import ConfigError

KEYS_FD = "AGENT_SERVER_KEYS_FD"
#: The variables a launcher may hand over the pipe: the server's keys, nothing else.
KeyName = Literal["SESSION_API_KEY", "AGENT_SERVER_WEBHOOK_API_KEY", "AGENT_SERVER_WEBHOOK_SECRET",
                  "AGENT_SERVER_WEBHOOK_SENDER", "AGENT_SERVER_NETWORK_URL",
                  "AGENT_SERVER_NETWORK_TOKEN"]
#: Far more than three keys need; a writer that never stops is refused.
MAX_BYTES = 64 * 1024
PR_SET_DUMPABLE = 4

_KEYS = TypeAdapter(dict[KeyName, str])


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
        keys = parse_keys(data)
    except ValueError:
        raise ConfigError(f"{KEYS_FD}={fd}: expected a JSON object of SESSION_API_KEY / "
                          "AGENT_SERVER_WEBHOOK_* / AGENT_SERVER_NETWORK_* strings") from None
    for name, value in keys.items():
        environ[name] = value


def parse_keys(data: bytes) -> dict[str, str]:
    """What a launcher hands over (ValueError when it is not a JSON object of key names to
    strings): checked before anything acts on it."""
    keys = _KEYS.validate_python(json.loads(data))  # (pydantic's ValidationError is one)
    return {str(name): value for name, value in keys.items()}


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
