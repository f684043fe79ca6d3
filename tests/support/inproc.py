"""The app of build_app with a ScriptedModel, in this process: behind Starlette's TestClient
(no socket), or served by uvicorn in a thread (real sockets, for websockets and the fuzz).
The lifespan runs either way; no subprocess, no LLM."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from starlette.testclient import TestClient

from agent_server.agent.model import Model, ScriptedModel
from agent_server.app import build_app
from agent_server.config import Config
from tests.support.llm import free_port
from tests.support.threaded import ThreadedServer

KEY = "in-process-key"


def config(root: Path, **values: object) -> Config:
    (root / "workspace").mkdir(parents=True, exist_ok=True)
    return Config.model_validate({"state_dir": root / "state", "session_api_keys": (KEY,),
                                  "working_dir": root / "workspace", **values})


@contextmanager
def app_client(root: Path, model: Model | None = None, **values: object) -> Iterator[TestClient]:
    app = build_app(config(root, **values), model=model or ScriptedModel())
    with TestClient(app, headers={"X-Session-API-Key": KEY},
                    raise_server_exceptions=False) as client:
        yield client


@contextmanager
def served(root: Path, model: Model | None = None, **values: object) -> Iterator[str]:
    """The app on a loopback port; yields its base URL and always stops it."""
    port = free_port()
    app = build_app(config(root, **values), model=model or ScriptedModel())
    server = ThreadedServer(app, port, "agent-server-in-process", lifespan="on")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
