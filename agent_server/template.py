"""The sandbox template: one process that has imported the agent server, litellm included, and
forks each sandbox's server from itself.

An agent server that starts by itself spends seconds and ~130 MiB importing litellm and the
types it brings, the same bytes in every sandbox. Forked from here, a server starts with all of
it loaded and shares those pages copy-on-write with the template and every other sandbox
(`gc.freeze()` keeps the collector from writing to them); its first model call waits for no
import, nor builds again what litellm builds on its first calls (the template made a few calls
of its own to a canned model, and a conversation of its own: `rehearsal`); a warm pool's server
rehearses again while it waits for its keys, so its first writes to those shared pages are made
before its start is asked for. The fork enters the sandbox bubblewrap made
(`core.namespaces`) and becomes its user before it runs anything, so it is as isolated as a
server bubblewrap started; it leaves the template's session, so the template ending (or
crashing) ends no sandbox.

    python -m agent_server.template --socket PATH

One request per connection (a Unix seqpacket socket the control plane alone can open): a JSON
`Fork` with four descriptors (the server's stdin, its output, a lifeline it holds open while it
runs, and the pipe it says it is ready on: `AGENT_SERVER_READY_FD`), answered
`{"pid": <host pid>}` or `{"error": ...}`. The template ends when its
stdin closes (the control plane that started it is gone).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import gc
import json
import logging
import os
import select
import socket
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Annotated, NoReturn

from pydantic import (
    Base64Bytes,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)

import tools
from agent_server import rehearsal
from agent_server.agent import litellm_setup
from core import namespaces
from launch.env import LaunchEnv
from tools import base as tool_base

#: A request is a few KiB (the environment); anything bigger is not one.
MAX_REQUEST = 256 * 1024
DESCRIPTORS = 4
#: Where the fork keeps its lifeline and its ready pipe (above the standard three; never
#: inherited).
LIFELINE_FD = 3
READY_FD = 4
PR_SET_CHILD_SUBREAPER = 36
#: How often ended servers are collected when no request comes.
REAP_INTERVAL = 1.0


#: A control group's process list, the only file a fork request may have written (no
#: `.` or `..` in its path).
CgroupProcs = Annotated[
    str,
    StringConstraints(
        pattern=r"^/sys/fs/cgroup/(?:[A-Za-z0-9_,-][A-Za-z0-9_.,-]*/)+cgroup\.procs$",
        max_length=512,
    ),
]


class Fork(BaseModel):
    """A sandbox's server: the namespaces of `enter` (a process bubblewrap started), run as
    `uid`, in `cwd`, with this environment and these arguments of `agent-server`."""

    model_config = ConfigDict(extra="forbid")

    enter: int = Field(gt=1)
    uid: int = Field(gt=0)
    cwd: str
    env: dict[str, str]
    argv: list[str]
    cgroups: list[CgroupProcs] = Field(default_factory=list, max_length=8)
    """The sandbox's `cgroup.procs` files (its limits): the server moves itself in first."""
    seccomp: Base64Bytes = Field(default=b"", max_length=64 * 1024)
    """The sandbox's seccomp filter (a BPF program, as bubblewrap's `--seccomp` reads it),
    loaded once the server is the sandbox's user; empty: none."""


def preload() -> None:
    """Everything a server imports to start and to make its first model call."""
    import uvicorn.lifespan.on  # noqa: F401
    import uvicorn.loops.asyncio  # noqa: F401
    import uvicorn.protocols.http.auto  # noqa: F401

    import agent_server.__main__
    import agent_server.app  # noqa: F401
    import agent_server.websocket  # noqa: F401

    agent_server.__main__.parser()
    litellm_setup.load_now()  # litellm, its settings, what its first call imports and the CA bundle
    for action_type in tools.action_types():  # what a conversation's first request shows
        tool_base.action_schema(action_type)
    rehearsal.warm_up()
    rehearsal.first_conversation()
    gc.collect()
    gc.freeze()  # all of it in the permanent generation: no collection writes to those pages


def serve(path: Path) -> None:
    """Answers fork requests until stdin closes."""
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(path))
    os.chmod(path, 0o600)
    listener.listen(16)
    print("template: ready", file=sys.stderr, flush=True)
    while True:
        readable, _, _ = select.select([listener, sys.stdin], [], [], REAP_INTERVAL)
        _reap()
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            return
        if listener in readable:
            connection, _ = listener.accept()
            with connection:
                answer = _handle(connection, listener)
                connection.sendall(json.dumps(answer).encode())


def _reap() -> None:
    """Servers that ended: this process's children, collected here rather than left as
    zombies (and, as a child subreaper, whatever is orphaned below it)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _handle(connection: socket.socket, listener: socket.socket) -> dict[str, object]:
    connection.settimeout(10)
    fds: list[int] = []
    try:
        data, fds, _, _ = socket.recv_fds(connection, MAX_REQUEST, DESCRIPTORS)
        if len(fds) != DESCRIPTORS:
            return {"error": f"expected {DESCRIPTORS} descriptors, got {len(fds)}"}
        request = Fork.model_validate_json(data)
        return {"pid": _fork(request, fds, [connection, listener])}
    except (OSError, ValidationError, ValueError) as exc:
        return {"error": str(exc)[:2000]}
    finally:
        for fd in fds:
            os.close(fd)


def _fork(request: Fork, fds: list[int], sockets: list[socket.socket]) -> int:
    """The server's host pid: one fork, born in the sandbox's pid namespace (this process
    points its children there for the fork, and back at once), that enters the sandbox's
    other namespaces before it runs anything else. A fork that cannot enter ends, and its
    sandbox with it (its lifeline closes)."""
    entry = namespaces.Entry(request.enter)
    try:
        with entry.children():
            server = os.fork()
            if server == 0:
                _become(request, entry, fds, sockets)
    finally:
        entry.close()
    return server


def _waiting() -> bool:
    """No keys on stdin yet: a warm pool's server, parked until its start comes (a start's own
    server has them before it is forked)."""
    return not select.select([0], [], [], 0)[0]


def _become(
    request: Fork, entry: namespaces.Entry, fds: list[int], sockets: list[socket.socket]
) -> NoReturn:
    """The server, in the sandbox: its namespaces, its descriptors, its user, its environment."""
    code = 1
    try:
        for sock in sockets:
            sock.close()
        try:
            for procs in request.cgroups:  # before anything of the sandbox runs
                Path(procs).write_text("0")
            entry.join()
            os.chdir(request.cwd)
        except OSError as exc:  # said in the sandbox's log, which its start's error quotes
            os.write(fds[1], f"agent-server-template: cannot enter the sandbox: {exc}\n".encode())
            raise
        os.setsid()  # out of the template's session: its end is not the sandbox's
        stdin, output, lifeline, ready = fds
        os.dup2(stdin, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        # Moved above the targets first: no move overwrites another's source.
        lifeline, ready = (
            fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, READY_FD + 1) for fd in (lifeline, ready)
        )
        os.dup2(lifeline, LIFELINE_FD, inheritable=False)
        os.dup2(ready, READY_FD, inheritable=False)
        os.closerange(READY_FD + 1, os.sysconf("SC_OPEN_MAX"))
        namespaces.drop_to(request.uid)
        if request.seccomp:
            namespaces.confine(request.seccomp)
        os.environ.clear()
        os.environ.update(
            {
                **litellm_setup.ENVIRONMENT,
                **request.env,
                **LaunchEnv(ready_fd=READY_FD).environment(),
            }
        )
        tempfile.tempdir = None  # chosen again from the sandbox's TMPDIR, not the template's
        sys.argv = ["agent-server", *request.argv]
        logging.root.handlers.clear()
        from agent_server.__main__ import main

        rehearsal.rehearse(_waiting)  # a warm pool's (no keys yet); a start's does not wait
        main(request.argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="agent-server-template", description=__doc__)
    parser.add_argument("--socket", type=Path, required=True)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("agent-server-template: only root enters a sandbox's namespaces")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("agent-server-template: prctl(PR_SET_CHILD_SUBREAPER) failed")
    preload()
    serve(args.socket)


if __name__ == "__main__":
    main()
