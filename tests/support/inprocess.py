"""The server in-process: `build_app(config, model)` with a ScriptedModel (no subprocess, no
litellm), its lifespan running, reached three ways:

- `serve`: behind httpx's ASGI transport, in the test's own event loop, so a test can also
  reach the services (`srv.conversation(cid)`). The lifespan runs for real (the ASGI lifespan
  protocol, as uvicorn drives it), and its state is copied into every request's scope the way
  uvicorn does, so routes find their `Services`. Shutdown always runs, in `finally`, as
  uvicorn's `tests/utils.py::run_server` does.
- `app_client`: behind Starlette's synchronous TestClient (no socket).
- `served`: uvicorn in a thread on a loopback port (real sockets: websockets, the fuzz).

Each takes the test's directory `root`: the state goes to root/state, and the default working
directory is root/workspace.

    async with serve(tmp_path, ScriptedModel([...])) as srv:
        r = await srv.client.post("/api/conversations", json=body(srv))
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent_server.agent.model import Model, ScriptedModel
from agent_server.app import build_app
from agent_server.config import Config
from agent_server.conversations import Conversation
from agent_server.services import Services
from events import Event, parse_event
from tests.support.llm import free_port
from tests.support.threaded import ThreadedServer

KEY = "test-session-key"


class Lifespan:
    """Drives an ASGI app's lifespan protocol; `state` is what its lifespan yielded."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.state: dict[str, Any] = {}
        self._inbox: asyncio.Queue[Message] = asyncio.Queue()
        self._outbox: asyncio.Queue[Message] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def _expect(self, wanted: str) -> None:
        message = await self._outbox.get()
        if message["type"] != wanted:
            raise RuntimeError(f"lifespan: expected {wanted}, got {message}")

    async def startup(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": self.state}
        self._task = asyncio.create_task(
            self.app(scope, self._inbox.get, self._outbox.put), name="lifespan"
        )  # type: ignore[arg-type]
        await self._inbox.put({"type": "lifespan.startup"})
        await self._expect("lifespan.startup.complete")

    async def shutdown(self) -> None:
        if self._task is None or self._task.done():
            return
        await self._inbox.put({"type": "lifespan.shutdown"})
        await self._expect("lifespan.shutdown.complete")
        await self._task


class WithState:
    """Copies the lifespan state into each request's scope (uvicorn does the same)."""

    def __init__(self, app: ASGIApp, state: dict[str, Any]) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = {**scope, "state": dict(self.state)}
        await self.app(scope, receive, send)


@dataclass
class InProcess:
    config: Config
    model: ScriptedModel
    services: Services
    client: httpx.AsyncClient

    def conversation(self, cid: str) -> Conversation:
        conv = self.services.conversations.get(uuid.UUID(cid))
        assert conv is not None, cid
        return conv


def config(root: Path, **values: Any) -> Config:
    """A Config on root/state whose default working directory, root/workspace, exists."""
    (root / "workspace").mkdir(parents=True, exist_ok=True)
    return Config.model_validate(
        {
            "state_dir": root / "state",
            "session_api_keys": (KEY,),
            "working_dir": root / "workspace",
            **values,
        }
    )


@contextlib.asynccontextmanager
async def serve(
    root: Path, model: ScriptedModel | None = None, **values: Any
) -> AsyncIterator[InProcess]:
    """The app, started, with a client sending the session key."""
    settings = config(root, **values)
    model = model if model is not None else ScriptedModel()
    app = build_app(settings, model=model)
    lifespan = Lifespan(app)
    await lifespan.startup()
    try:
        transport = httpx.ASGITransport(app=WithState(app, lifespan.state))
        async with httpx.AsyncClient(
            transport=transport, base_url="http://agent-server", headers={"X-Session-API-Key": KEY}
        ) as client:
            yield InProcess(settings, model, lifespan.state["services"], client)
    finally:
        await lifespan.shutdown()


@contextlib.contextmanager
def app_client(root: Path, model: Model | None = None, **values: Any) -> Iterator[TestClient]:
    """The app behind a TestClient sending the session key (a server error is a 500 here, as
    a client would see it, not an exception)."""
    app = build_app(config(root, **values), model=model or ScriptedModel())
    with TestClient(
        app, headers={"X-Session-API-Key": KEY}, raise_server_exceptions=False
    ) as client:
        yield client


@contextlib.contextmanager
def served(root: Path, model: Model | None = None, **values: Any) -> Iterator[str]:
    """The app on a loopback port; yields its base URL and always stops it."""
    port = free_port()
    app = build_app(config(root, **values), model=model or ScriptedModel())
    server = ThreadedServer(app, port, "agent-server-in-process", lifespan="on")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def agent(tools: Iterable[str] = (), **llm: Any) -> dict[str, Any]:
    """The `agent` of a creation request for the scripted model (litellm is never reached)."""
    return {"llm": {"model": "scripted/test", **llm}, "tools": [{"name": t} for t in tools]}


def create_body(
    workspace: Path,
    tools: Iterable[str] = (),
    message: str | None = None,
    run: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "agent": agent(tools),
        "workspace": {"working_dir": str(workspace)},
        **extra,
    }
    if message is not None:
        body["initial_message"] = {"content": [{"type": "text", "text": message}], "run": run}
    return body


async def run_ends(conv: Conversation, timeout: float = 30) -> None:
    """Wait for the conversation's run task (if any) to end: its last event is written."""
    task = conv._task
    if task is not None:
        await asyncio.wait_for(
            asyncio.gather(asyncio.shield(task), return_exceptions=True), timeout
        )


async def events(conv: Conversation, kind: type[Event] | None = None) -> list[Any]:
    """Every stored event of the conversation, parsed, optionally of one kind."""
    log = await conv.log()
    await log.drain()
    parsed = [parse_event(line) for line in log.read(range(len(log)))]
    return [e for e in parsed if kind is None or isinstance(e, kind)]


class GatedModel(ScriptedModel):
    """A ScriptedModel that holds each answer until the test opens `gate`: `waiting` is set
    while a request is held, so a test acts exactly while the model is being asked."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    async def complete(self, *args: Any, **kw: Any) -> Any:
        self.waiting.set()
        await self.gate.wait()
        return await super().complete(*args, **kw)


async def new_conversation(
    srv: InProcess, workspace: Path, tools: Iterable[str] = (), **extra: Any
) -> Conversation:
    """A conversation made through the service (not HTTP), for the core's own tests."""
    from agent_server.record import CreateConversation

    request = CreateConversation.model_validate(create_body(workspace, tools, **extra))
    conv, created = await srv.services.conversations.create(request)
    assert created
    return conv
