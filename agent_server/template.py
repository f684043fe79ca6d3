"""The sandbox template: one process that has imported the agent server, litellm included, and
forks each sandbox's server from itself.

An agent server that starts by itself spends seconds and ~130 MiB importing litellm and the
types it brings, the same bytes in every sandbox. Forked from here, a server starts with all of
it loaded and shares those pages copy-on-write with the template and every other sandbox
(`gc.freeze()` keeps the collector from writing to them); its first model call waits for no
import, nor builds again what litellm builds on its first calls (the template made a few calls
of its own to a canned model: `warm_up`). The fork enters the sandbox bubblewrap made
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
import asyncio
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
    SecretStr,
    StringConstraints,
    ValidationError,
)

import tools
from agent_server.agent import litellm_setup, transport
from agent_server.agent.model import LiteLLMModel
from agent_server.agent.spec import LLMConfig
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
    warm_up()
    gc.collect()
    gc.freeze()  # all of it in the permanent generation: no collection writes to those pages


#: The warm-up's models: one litellm's map knows (its cost is computed) and one it does not
#: (litellm looks for it among its providers, importing some, and formats a traceback for
#: its cost: the source lines that reads are cached here once).
WARM_MODELS = ("openai/gpt-4o-mini", "openai/agent-server-template")
#: Calls per model: the canned model answers a tool call, then text.
WARM_CALLS = 2
WARM_TIMEOUT = 30.0
#: What the warm-up keeps of this process's environment: litellm reads variables as it calls
#: (a provider's key, base URL, region...), and none of this host's may end up in what it
#: caches for the servers forked later.
WARM_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")


def warm_up() -> int:
    """A server's first model calls, made here once; the number answered (0: skipped).

    What litellm builds on its first calls (pydantic schemas it completes late, its
    lower-cased price map, provider modules it imports, the lines of a cost failure's
    traceback, its providers' configurations) would otherwise be built again in every
    sandbox's own memory: ~8 MiB each, measured. The model is a canned one on this host's
    loopback, the key a made-up one, the environment `WARM_ENV` only, the loop (asyncio's
    own) one of the warm-up's, closed before any fork: nothing of a tenant, nor of this
    host, is involved. A failure is said in a line and changes nothing else: the warm-up
    only saves memory."""
    canned = _CannedModel()
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(
        {k: v for k, v in saved.items() if k in WARM_ENV or k in litellm_setup.ENVIRONMENT}
    )
    try:
        with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
            runner.run(asyncio.wait_for(_warm_calls(canned), WARM_TIMEOUT))
    except Exception as exc:  # any failure leaves the template as it was, only larger
        print(f"template: warm-up skipped: {exc!r}", file=sys.stderr, flush=True)
        return 0
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return canned.calls


async def _warm_calls(canned: _CannedModel) -> None:
    server = await asyncio.start_server(canned.answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    model = LiteLLMModel()
    try:
        for name in WARM_MODELS:
            config = LLMConfig(
                model=name,
                base_url=f"http://127.0.0.1:{port}/v1",
                api_key=SecretStr("sk-template-warm-up"),
                num_retries=0,
                timeout=10,
            )
            await model.supports_vision(config)
            await model.context_window(config)
            for _ in range(WARM_CALLS):
                await model.complete(config, _WARM_MESSAGES, _WARM_TOOLS)
    finally:
        # Its HTTP client belongs to the warm-up's loop (`transport.client` keeps one per
        # loop, by the loop's id): closed and forgotten, no server's loop may find it.
        await transport.close_clients()
        server.close()
        await server.wait_closed()
        await canned.closed()


_WARM_TOOLS: list[dict[str, object]] = [
    {
        "type": "function",
        "function": {
            "name": "think",
            "description": "Think.",
            "parameters": {"type": "object", "properties": {"thought": {"type": "string"}}},
        },
    }
]
_WARM_MESSAGES: list[dict[str, object]] = [
    {"role": "system", "content": "You are a warm-up."},
    {"role": "user", "content": [{"type": "text", "text": "Think."}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call-1",
                "type": "function",
                "function": {"name": "think", "arguments": '{"thought": "a"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call-1", "name": "think", "content": "ok"},
]


class _CannedModel:
    """An OpenAI-compatible chat completions endpoint that answers a tool call and text in
    turn (both shapes of answer parsed once)."""

    def __init__(self) -> None:
        self.calls = 0
        self.connections: set[asyncio.Task[None]] = set()

    async def answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                body = self._body()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # the client closed the connection
        except asyncio.CancelledError:
            pass  # ended by `closed`: a task of this server's own, awaited by no one else
        finally:
            writer.close()
            self.connections.discard(task)

    def _body(self) -> bytes:
        self.calls += 1
        tool = self.calls % 2 == 1
        call = {
            "id": f"call-{self.calls}",
            "type": "function",
            "function": {"name": "think", "arguments": '{"thought": "b"}'},
        }
        message = (
            {"role": "assistant", "content": None, "tool_calls": [call]}
            if tool
            else {"role": "assistant", "content": "Done."}
        )
        return json.dumps(
            {
                "id": f"chatcmpl-warm-up-{self.calls}",
                "object": "chat.completion",
                "created": 0,
                "model": "warm-up",
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if tool else "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        ).encode()

    async def closed(self) -> None:
        """Every connection's handler ended: the client closed them all (a handler sees it on
        its next turn), or, after a second, they are ended here."""
        if self.connections:
            await asyncio.wait(list(self.connections), timeout=1.0)
        for task in list(self.connections):
            task.cancel()
        await asyncio.gather(*self.connections, return_exceptions=True)


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
