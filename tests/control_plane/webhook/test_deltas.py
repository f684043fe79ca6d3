"""The DeltaHub against a stand-in agent-server socket (a real websockets server on loopback):
one socket per followed conversation, only deltas forwarded, a slow follower dropping deltas
without holding up the socket or the others, closed when the sandbox stops or the last follower
leaves, opened again after a drop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from control_plane.deltas import DeltaHub, delta_line, socket_url
from core.retry import Backoff

CID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


class Agent:
    """Sends a full_state frame on each socket, then whatever a test broadcasts."""

    def __init__(self) -> None:
        self.sockets: set[ServerConnection] = set()
        self.opened = 0
        self.keys: list[str | None] = []
        self.paths: list[str] = []

    async def handler(self, socket: ServerConnection) -> None:
        assert socket.request is not None
        self.keys.append(socket.request.headers.get("X-Session-API-Key"))
        self.paths.append(socket.request.path)
        self.opened += 1
        self.sockets.add(socket)
        try:
            await socket.send(
                json.dumps(
                    {
                        "kind": "ConversationStateUpdateEvent",
                        "key": "full_state",
                        "value": {"execution_status": "idle"},
                    }
                )
            )
            await socket.wait_closed()
        finally:
            self.sockets.discard(socket)

    async def broadcast(self, event: dict[str, Any]) -> None:
        for socket in list(self.sockets):
            await socket.send(json.dumps(event, indent=1))  # several lines: relayed as one


class Hub(DeltaHub):
    """The hub with its sandbox lookup replaced: `target` is where the sandbox is, or None."""

    target: tuple[str, str, str] | None = None

    async def _target(self, conversation_id: str) -> tuple[str, str, str] | None:  # type: ignore[override]
        return self.target


@pytest.fixture
async def agent() -> AsyncIterator[tuple[Agent, str]]:
    stand_in = Agent()
    async with serve(stand_in.handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield stand_in, f"http://127.0.0.1:{port}"


def new_hub(url: str, queue: int = 256) -> Hub:
    hub = Hub(
        None,
        None,
        poll=0.05,
        queue=queue,  # type: ignore[arg-type]
        backoff=Backoff(minimum=0.01, maximum=0.05),
    )
    hub.target = ("sandbox-1", socket_url(url, CID), "sk-session")
    return hub


async def until(condition: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def delta(text: str) -> dict[str, Any]:
    return {"kind": "StreamingDeltaEvent", "id": "x", "content": text, "reasoning_content": None}


def test_frames_and_urls() -> None:
    assert socket_url("http://127.0.0.1:8000", CID) == f"ws://127.0.0.1:8000/sockets/events/{CID}"
    assert socket_url("https://a.example/", CID) == f"wss://a.example/sockets/events/{CID}"
    assert (
        delta_line(json.dumps(delta("a\nb"), indent=2))
        == '{"kind":"StreamingDeltaEvent","id":"x","content":"a\\nb","reasoning_content":null}'
    )
    assert delta_line('{"kind": "MessageEvent", "text": "StreamingDeltaEvent"}') is None
    assert delta_line("StreamingDeltaEvent, not JSON") is None


async def test_one_socket_for_every_follower_and_only_deltas(agent: tuple[Agent, str]) -> None:
    stand_in, url = agent
    hub = new_hub(url)
    fast_flag, slow_flag = asyncio.Event(), asyncio.Event()
    assert stand_in.opened == 0
    try:
        with hub.follow(CID, fast_flag) as fast:
            with hub.follow(CID, slow_flag) as slow:
                await until(lambda: len(stand_in.sockets) == 1, "the socket")
                assert stand_in.keys == ["sk-session"]
                assert stand_in.paths == [f"/sockets/events/{CID}"]  # live only: no replay
                await stand_in.broadcast({"kind": "MessageEvent", "id": "stored"})
                await stand_in.broadcast(delta("Hel"))
                await stand_in.broadcast(delta("lo"))
                got: list[str] = []
                await until(lambda: (got.extend(fast.drain()), len(got) == 2)[1], "the deltas")
                assert [json.loads(line)["content"] for line in got] == ["Hel", "lo"]
                assert slow_flag.is_set() and len(slow.drain()) == 2
                assert stand_in.opened == 1
            assert len(stand_in.sockets) == 1  # one follower is left
        await until(lambda: not stand_in.sockets, "the socket to close with the last follower")
        assert not hub.connected and stand_in.opened == 1
    finally:
        await hub.close()


async def test_a_slow_follower_loses_deltas_and_holds_up_nobody(agent: tuple[Agent, str]) -> None:
    stand_in, url = agent
    hub = new_hub(url, queue=3)
    try:
        with hub.follow(CID, asyncio.Event()) as fast, hub.follow(CID, asyncio.Event()) as slow:
            await until(lambda: len(stand_in.sockets) == 1, "the socket")
            got: list[str] = []
            for i in range(10):  # the slow one never reads
                await stand_in.broadcast(delta(str(i)))
                await until(
                    lambda i=i: (got.extend(fast.drain()), len(got) == i + 1)[1], f"delta {i}"
                )
            assert [json.loads(line)["content"] for line in slow.drain()] == ["0", "1", "2"]
            assert slow.dropped == 7 and fast.dropped == 0
    finally:
        await hub.close()


async def test_closed_while_the_sandbox_is_stopped_and_reopened_after_a_drop(
    agent: tuple[Agent, str],
) -> None:
    stand_in, url = agent
    hub = new_hub(url)
    try:
        with hub.follow(CID, asyncio.Event()) as follower:
            await until(lambda: len(stand_in.sockets) == 1, "the socket")
            target, hub.target = hub.target, None  # paused, stopped, in ERROR
            await until(lambda: not stand_in.sockets and not hub.connected, "the socket to close")
            hub.target = target  # RUNNING again
            await until(lambda: len(stand_in.sockets) == 1, "a new socket")
            assert stand_in.opened == 2
            for socket in list(stand_in.sockets):  # the agent server restarts
                await socket.close(1012)
            await until(
                lambda: stand_in.opened == 3 and len(stand_in.sockets) == 1, "a reconnection"
            )
            await stand_in.broadcast(delta("still here"))
            await until(lambda: bool(follower._queue), "a delta on the new socket")
        await until(lambda: not stand_in.sockets, "the socket to close")
    finally:
        await hub.close()
