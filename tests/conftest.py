"""Shared fixtures: the in-process server (the default tier), the scripted LLM server and the
real agent server in a subprocess (e2e)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_server.agent.model import ScriptedModel
from tests.support.inprocess import InProcess, serve
from tests.support.llm import ScriptedLLM
from tests.support.server import ServerProcess

#: Test modules that share the host's Docker daemon (the Docker provider's and Swarm's: the
#: Swarm tests turn swarm mode on and off, and either may start dockerd), run on one worker.
DOCKER_MODULES = (
    "tests/control_plane/sandboxes/test_docker.py",
    "tests/control_plane/sandboxes/test_swarm.py",
    "tests/control_plane/sandboxes/test_warm_pool.py",
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `pytest -n N` (as `make test` runs): a module's tests on one worker, in order, so
    its module-scoped servers start once; the Docker modules together; the longest first."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "docker" if module in DOCKER_MODULES else module

    return ModuleScheduling(config, log)


@pytest.fixture
def model() -> ScriptedModel:
    """The in-process server's model; tests add answers to `model.script`."""
    return ScriptedModel()


@pytest.fixture
async def srv(tmp_path: Path, model: ScriptedModel) -> AsyncIterator[InProcess]:
    """build_app(config, model) with its lifespan running, behind the ASGI transport."""
    async with serve(tmp_path, model) as running:
        yield running


@pytest.fixture(scope="session")
def llm() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One agent server per test module (tests keep to their own conversations)."""
    proc = ServerProcess(tmp_path_factory.mktemp("server") / "state").start()
    yield proc
    proc.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


@pytest.fixture
def key() -> str:
    """A fresh script key for the scripted LLM (one per test)."""
    return uuid.uuid4().hex[:12]


def agent_spec(
    llm: ScriptedLLM, key: str, tools: list[str] | None = None, **llm_extra: Any
) -> dict[str, Any]:
    """The `agent` of a creation request aimed at the scripted LLM."""
    spec: dict[str, Any] = {
        "llm": {
            "model": "openai/test-model",
            "base_url": llm.base_url(key),
            "api_key": "sk-test-key",
            "num_retries": 2,
            **llm_extra,
        },
    }
    if tools is not None:
        spec["tools"] = [{"name": t} for t in tools]
    return spec


def create(
    client: httpx.Client,
    llm: ScriptedLLM,
    key: str,
    workspace: Path,
    tools: list[str] | None = None,
    message: str | None = None,
    run: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    agent = agent_spec(llm, key, tools, **extra.pop("llm_extra", {}))
    if "agent_condenser" in extra:
        agent["condenser"] = extra.pop("agent_condenser")
    body: dict[str, Any] = {
        "agent": agent,
        "workspace": {"working_dir": str(workspace)},
        **extra,
    }
    if message is not None:
        body["initial_message"] = {"content": [{"type": "text", "text": message}], "run": run}
    r = client.post("/api/conversations", json=body)
    assert r.status_code == 201, r.text
    return r.json()
