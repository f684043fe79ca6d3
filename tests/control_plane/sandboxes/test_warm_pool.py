"""The Docker provider's warm pool (control_plane/providers/pool.py) for real: parked
containers are each handed to one sandbox with that sandbox's key alone, refilled, never
shared; they hold no key while they wait; and they end with the control plane that parked
them, whatever ends it (SIGKILL included), the next one removing what is left. The isolation
of a pooled sandbox is test_docker's tenant test, run with a pool."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import docker
import httpx
import pytest
from docker.models.containers import Container

from control_plane.providers import pool as pool_module
from control_plane.providers.containers import LABEL_PLANE, name_of, plane_label
from control_plane.providers.docker.pool import PREFIX
from control_plane.providers.docker.provider import DockerProvider
from control_plane.providers.docker.settings import DockerSettings
from control_plane.providers.parking import Parked
from control_plane.providers.pool import Pooled, WarmPool
from control_plane.sandboxes.measured import Measured
from control_plane.sandboxes.provider import Handle, Launch, SandboxProvider
from tests.control_plane.planes import PlaneProcess
from tests.control_plane.support import configure_llm, wait_task
from tests.support import docker as docker_support
from tests.support.docker import parked
from tests.support.llm import ScriptedLLM, call
from tests.support.wait import wait_for

HOOKS = "http://127.0.0.1:9/hooks"


def ours(engine: docker.DockerClient, plane: str) -> list[Container]:
    return engine.containers.list(all=True, filters={"label": f"{LABEL_PLANE}={plane}"})


async def until(condition: object, what: str, timeout: float = 60) -> None:
    """As wait_for, without blocking the loop the pool fills from."""
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def key_works(url: str, key: str) -> int:
    return httpx.get(
        url + "/api/conversations/search", headers={"X-Session-API-Key": key}, timeout=10
    ).status_code


class Noted(DockerProvider):
    """The Docker provider, noting when each park begins and each start is up (before the
    pool hears that start is over)."""

    def __init__(self, settings: DockerSettings) -> None:
        super().__init__(settings)
        self.parks: list[float] = []
        self.started: list[float] = []

    async def park(self, sandbox_id: str, webhook_url: str) -> Parked:
        self.parks.append(time.monotonic())
        return await super().park(sandbox_id, webhook_url)

    async def until_started(self, launch: Launch, started: str) -> Handle:
        handle = await super().until_started(launch, started)
        self.started.append(time.monotonic())
        return handle


@contextlib.asynccontextmanager
async def pooled(
    tmp_path: Path,
    image: str,
    engine: docker.DockerClient,
    size: int,
    kind: type[DockerProvider] = DockerProvider,
) -> AsyncIterator[tuple[Pooled, WarmPool, str]]:
    """A Docker provider in a pool of `size` (wrapped as the composition root does), once that
    many are parked; its plane label. Everything of it removed after."""
    plane = f"pool-{uuid.uuid4().hex[:12]}"  # its own: another run on this machine has others
    provider = Pooled(
        kind(
            DockerSettings(
                tmp_path / "archives", image=image, plane=plane, warm_pool=size, webhook_url=HOOKS
            )
        ),
        size,
        HOOKS,
    )
    await provider.start()
    try:
        pool = provider.pool
        await until(lambda: len(pool.waiting) == size, f"{size} parked")
        yield provider, pool, plane
    finally:
        await provider.close()
        docker_support.remove_labelled(engine, f"{LABEL_PLANE}={plane}")


@pytest.mark.parametrize("wrapper", [Pooled, Measured])
def test_a_wrapper_asks_its_provider_everything(wrapper: type[SandboxProvider]) -> None:
    """What wraps a provider (the warm pool, the measures) answers every method of the seam
    itself (the provider's, asked of it: `sandboxes.wrapper.Wrapper`), none left to the seam's
    defaults, which would answer for the provider."""
    seam = {
        name
        for name, value in vars(SandboxProvider).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }
    defaults = [n for n in seam if getattr(wrapper, n) is getattr(SandboxProvider, n)]
    assert seam and defaults == []


async def test_each_parked_container_goes_to_one_sandbox_with_its_key_alone(
    tmp_path: Path,
    sandbox_image: str,
    engine: docker.DockerClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with pooled(tmp_path, sandbox_image, engine, 2) as (provider, pool, plane):
        first = parked(engine, plane)
        assert set(first) == set(pool.waiting) and set(first.values()) == {"running"}
        for container in ours(engine, plane):  # waiting, they hold no key anywhere
            assert container.attrs["Config"]["Entrypoint"][-1] == "agent_server.warm"
            assert "SESSION_API_KEY" not in " ".join(container.attrs["Config"]["Env"])

        # Three new sandboxes at once: two take the parked ones, the third starts cold.
        ids = [provider.reserve("docker") for _ in range(3)]
        assert ids[2] is None and set(ids[:2]) == set(first)
        assert provider.reserve("another-spec") is None
        launches = [
            Launch(
                sandbox_id=sid or "cold" + tmp_path.name[-8:],
                spec_id="docker",
                root_dir=Path("/workspace"),
                session_api_key=f"sk-pool-{n}-secret",
                webhook_url=HOOKS,
            )
            for n, sid in enumerate(ids)
        ]
        handles = await asyncio.gather(*(provider.create(launch) for launch in launches))
        assert len({h.port for h in handles}) == 3
        for n, (handle, launch) in enumerate(zip(handles, launches, strict=True)):
            url = provider.url(handle)
            assert await asyncio.to_thread(key_works, url, launch.session_api_key) == 200
            other = launches[(n + 1) % 3].session_api_key
            assert await asyncio.to_thread(key_works, url, other) == 401
            [container] = [c for c in ours(engine, plane) if c.name == name_of(launch.sandbox_id)]
            assert container.status == "running"
            assert (container.attrs["Config"]["Entrypoint"][-1] == "agent_server.warm") == (
                n < 2
            ), [r.getMessage() for r in caplog.records if "warm pool" in r.getMessage()]

        # Refilled with new containers (never the claimed ones back); a close removes the
        # parked ones and leaves the sandboxes.
        await until(lambda: len(pool.waiting) == 2, "the pool refilled")
        assert set(parked(engine, plane)) == set(pool.waiting) and not set(pool.waiting) & set(
            first
        )
        await provider.close()
        assert sorted(str(c.name) for c in ours(engine, plane)) == sorted(
            name_of(launch.sandbox_id) for launch in launches
        )
        volumes = engine.volumes.list(filters={"label": f"{LABEL_PLANE}={plane}"})
        assert sorted(v.name for v in volumes) == sorted(name_of(x.sandbox_id) for x in launches)


async def test_a_burst_of_starts_has_the_cores_and_the_pool_refills_after_it(
    tmp_path: Path,
    sandbox_image: str,
    engine: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A park (a container made and started, a server loading everything) beside a burst's
    starts would slow each of them: none begins while a start is under way, however soon
    after another start's end (the pause after the last start is set to nothing here, so it
    is the starts under way that hold the parks off)."""
    monkeypatch.setattr(pool_module, "REFILL_PAUSE", 0.0)
    async with pooled(tmp_path, sandbox_image, engine, 2, Noted) as (provider, pool, _):
        noted = provider.provider
        assert isinstance(noted, Noted)
        assert len(noted.parks) == 2
        ids = [provider.reserve("docker") for _ in range(3)]  # two claims and a cold start
        handles = await asyncio.gather(
            *(
                provider.create(
                    Launch(
                        sandbox_id=sid or "cold" + uuid.uuid4().hex[:12],
                        spec_id="docker",
                        root_dir=Path("/workspace"),
                        session_api_key=f"sk-burst-{n}",
                        webhook_url=HOOKS,
                    )
                )
                for n, sid in enumerate(ids)
            )
        )
        assert len(handles) == 3 and len(noted.started) == 3
        await until(lambda: len(pool.waiting) == 2, "the pool refilled")
        refills = noted.parks[2:]
        assert len(refills) == 2 and min(refills) > max(noted.started), (refills, noted.started)


async def test_a_parked_container_whose_server_died_gives_way_to_a_cold_start(
    tmp_path: Path, sandbox_image: str, engine: docker.DockerClient
) -> None:
    async with pooled(tmp_path, sandbox_image, engine, 1) as (provider, _, _):
        sid = provider.reserve("docker")
        assert sid is not None
        engine.containers.get(PREFIX + sid).kill()
        launch = Launch(
            sandbox_id=sid,
            spec_id="docker",
            root_dir=Path("/workspace"),
            session_api_key="sk-after-a-death",
            webhook_url=HOOKS,
        )
        handle = await provider.create(launch)
        assert await asyncio.to_thread(key_works, provider.url(handle), "sk-after-a-death") == 200
        container = engine.containers.get(name_of(sid))
        assert (
            container.attrs["Config"]["Entrypoint"][-1] != "agent_server.warm"
        )  # made cold, same id


@pytest.fixture
def pooled_plane(
    tmp_path: Path, sandbox_image: str, engine: docker.DockerClient
) -> Iterator[PlaneProcess]:
    (tmp_path / "cp").mkdir()
    server = PlaneProcess(
        tmp_path / "cp",
        host="0.0.0.0",
        sandbox_provider="docker",
        sandbox_image=sandbox_image,
        warm_pool="2",
    )
    yield server.start()
    server.stop()
    docker_support.remove_labelled(engine, f"{LABEL_PLANE}={plane_of(server)}")


def plane_of(server: PlaneProcess) -> str:
    return plane_label(f"sqlite+aiosqlite:///{server.state_dir / 'control-plane.db'}")


@pytest.mark.e2e
def test_parked_containers_end_with_their_control_plane_and_the_next_removes_them(
    pooled_plane: PlaneProcess, bridge_llm: ScriptedLLM, key: str, engine: docker.DockerClient
) -> None:
    plane = plane_of(pooled_plane)
    wait_for(
        lambda: list(parked(engine, plane).values()) == ["running"] * 2,
        60,
        what="2 parked containers",
    )
    first = parked(engine, plane)
    with httpx.Client(
        base_url=pooled_plane.url,
        timeout=30,
        headers={"Authorization": f"Bearer {pooled_plane.new_key('alice')}"},
    ) as client:
        configure_llm(client, bridge_llm.base_url(key))  # the gateway calls it
        bridge_llm.script(key, call("finish", message="pooled and done"))
        body = {"initial_message": {"content": [{"type": "text", "text": "go"}], "run": True}}
        task = wait_task(client, client.post("/api/v1/app-conversations", json=body).json()["id"])
        assert task["status"] == "READY", task
        sid, cid = task["sandbox_id"], task["app_conversation_id"]
        assert sid in first  # a parked container, now this sandbox's
        wait_for(
            lambda: (
                "pooled and done"
                in client.get(
                    f"/api/v1/conversation/{cid}/events/search", params={"limit": 100}
                ).text
            ),
            60,
            what="the agent's answer, through the webhook",
        )

        # SIGKILLed: its attaches close, so its parked servers read the end of their keys'
        # pipe and exit; the sandbox lives on.
        pooled_plane.kill()
        left = set(parked(engine, plane)) - {sid}
        wait_for(
            lambda: all(parked(engine, plane).get(p) in ("exited", None) for p in left),
            60,
            what="the parked containers to end",
        )
        assert engine.containers.get(name_of(sid)).status == "running"

        pooled_plane.start()  # removes them, parks its own, adopts the sandbox
        wait_for(
            lambda: (
                not left & set(parked(engine, plane))
                and list(parked(engine, plane).values()) == ["running"] * 2
            ),
            60,
            what="the old parked containers removed and two new ones",
        )
        assert not [
            v
            for v in engine.volumes.list(filters={"label": f"{LABEL_PLANE}={plane}"})
            if v.name.removeprefix("agent-sandbox-") in left
        ]
        assert client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["status"] == "RUNNING"
