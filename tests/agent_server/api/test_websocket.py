"""/sockets/events/{id}: auth, replay and resume without gaps, fan-out, laggards, client frames.

The real server runs in a subprocess with small socket limits (a queue of 32 events or 128 KB, a 1 s
auth window, 55 subscribers per conversation) so that the limits are reached quickly; the
client is the `websockets` package.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import agent_spec
from tests.support.llm import Reply, ScriptedLLM, call, error
from tests.support.server import KEY, ServerProcess

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

LIMITS = {
    "AGENT_SERVER_WS_AUTH_TIMEOUT": "1",
    "AGENT_SERVER_WS_MAX_SUBSCRIBERS": "55",
    "AGENT_SERVER_WS_QUEUE_EVENTS": "32",
    "AGENT_SERVER_WS_QUEUE_BYTES": "131072",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("sockets") / "state", env=LIMITS).start()
    yield proc
    proc.stop()


@pytest.fixture
async def http(server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=server.url, headers={"X-Session-API-Key": KEY}, timeout=30
    ) as client:
        yield client


# -- helpers ---------------------------------------------------------------------------------------


async def create(
    http: httpx.AsyncClient,
    llm: ScriptedLLM,
    key: str,
    workspace: Path,
    message: str | None = None,
    **llm_extra: Any,
) -> str:
    body: dict[str, Any] = {
        "agent": agent_spec(llm, key, **llm_extra),
        "workspace": {"working_dir": str(workspace)},
    }
    if message is not None:
        body["initial_message"] = {"content": [{"type": "text", "text": message}], "run": True}
    r = await http.post("/api/conversations", json=body)
    assert r.status_code == 201, r.text
    return r.json()["id"]


async def search(http: httpx.AsyncClient, cid: str) -> tuple[list[dict[str, Any]], str]:
    """Every stored event, and the raw body of the search that returned them."""
    r = await http.get(f"/api/conversations/{cid}/events/search", params={"limit": 1000})
    assert r.status_code == 200 and r.json()["next_page_id"] is None
    return r.json()["items"], r.text


async def finished(
    http: httpx.AsyncClient, cid: str, timeout: float = 120
) -> tuple[list[dict[str, Any]], str]:
    """Wait for the run to finish and its last event (that status update) to be stored;
    every stored event then, and the raw search body."""
    deadline = time.monotonic() + timeout
    while True:
        items, body = await search(http, cid)
        last = items[-1]
        if (
            last["kind"] == "ConversationStateUpdateEvent"
            and last["key"] == "execution_status"
            and last["value"] in ("finished", "error", "stuck")
        ):
            assert last["value"] == "finished", items[-3:]
            return items, body
        assert time.monotonic() < deadline, f"no end after {timeout}s: {last}"
        await asyncio.sleep(0.05)


async def send(http: httpx.AsyncClient, cid: str, text: str, run: bool = False) -> None:
    r = await http.post(
        f"/api/conversations/{cid}/events",
        json={"role": "user", "content": [{"type": "text", "text": text}], "run": run},
    )
    assert r.status_code == 200, r.text


def url(server: ServerProcess, cid: str, **params: str) -> str:
    query = f"?{urlencode(params)}" if params else ""
    return f"ws://127.0.0.1:{server.port}/sockets/events/{cid}{query}"


async def open_socket(
    server: ServerProcess, cid: str, how: str = "header", key: str = KEY, **params: str
) -> ClientConnection:
    headers = {"X-Session-API-Key": key} if how == "header" else {}
    if how == "query":
        params["session_api_key"] = key
    ws = await connect(
        url(server, cid, **params), additional_headers=headers, max_size=None, proxy=None
    )
    if how == "frame":
        await ws.send(json.dumps({"type": "auth", "session_api_key": key}))
    return ws


async def close_code(ws: ClientConnection, timeout: float = 10) -> int:
    """Read until the server closes; its close code."""
    async with asyncio.timeout(timeout):
        try:
            while True:
                await ws.recv()
        except ConnectionClosed as closed:
            assert closed.rcvd is not None, "closed without a close frame"
            return closed.rcvd.code


def is_stored(event: dict[str, Any]) -> bool:
    """A frame of a stored event; the others (full_state snapshots, streaming deltas, errors
    about a client's own frames) have ids of their own that are not in the log."""
    if event["kind"] in ("StreamingDeltaEvent", "ServerErrorEvent"):
        return False
    return not (event["kind"] == "ConversationStateUpdateEvent" and event["key"] == "full_state")


def is_full_state(frame: str | bytes) -> bool:
    event = json.loads(frame)
    return bool(event["kind"] == "ConversationStateUpdateEvent" and event["key"] == "full_state")


class Reader:
    """Collects one socket's frames in the background."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[str] = []
        self.closed: ConnectionClosed | None = None
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            async for frame in self.ws:
                self.frames.append(frame)  # type: ignore[arg-type]
        except ConnectionClosed as exc:
            self.closed = exc

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(f) for f in self.frames]

    def ids(self) -> list[str]:
        """The ids of the stored events among the frames."""
        return [e["id"] for e in self.events() if is_stored(e)]

    async def wait_count(self, n: int, timeout: float = 30) -> None:
        """Until at least `n` stored events (frames with an id) arrived."""
        deadline = time.monotonic() + timeout
        while len(self.ids()) < n:
            assert time.monotonic() < deadline, f"got {len(self.ids())} of {n} events"
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        await self.ws.close()
        await self.task


def think_steps(llm: ScriptedLLM, key: str, n: int, pad: int = 0, delay: float = 0.0) -> None:
    """n think calls then finish; `pad` random bytes (incompressible) in each thought."""
    llm.script(
        key,
        *[
            Reply(
                text=f"on to step {i}",
                delay=delay,
                tool_calls=[("think", {"thought": f"step {i} " + os.urandom(pad).hex()})],
            )
            for i in range(n)
        ],
        call("finish", message="done"),
    )


# -- auth and close codes --------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["header", "frame", "query"])
async def test_each_way_of_authenticating_gets_the_events(
    server: ServerProcess,
    http: httpx.AsyncClient,
    llm: ScriptedLLM,
    key: str,
    tmp_path: Path,
    how: str,
) -> None:
    cid = await create(http, llm, key, tmp_path)
    items, body = await search(http, cid)
    ws = await open_socket(server, cid, how, resend_all="true")
    state = json.loads(await asyncio.wait_for(ws.recv(), 10))  # the state comes first
    assert state["key"] == "full_state" and state["value"]["id"] == cid and state["id"]
    assert state["value"]["execution_status"] == "idle" and state["value"]["leaf_event_id"]
    assert "sk-test-key" not in json.dumps(state)
    first = await asyncio.wait_for(ws.recv(), 10)
    assert json.loads(first) == items[0] and first in body  # byte for byte as search returns it
    assert items[0]["kind"] == "SystemPromptEvent"
    await ws.close()


async def test_wrong_or_missing_keys_close_with_4001_and_unknown_conversations_with_4004(
    server: ServerProcess, http: httpx.AsyncClient, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    cid = await create(http, llm, key, tmp_path)
    for how in ("header", "frame", "query"):
        ws = await open_socket(server, cid, how, key="not-" + KEY)
        assert await close_code(ws) == 4001, how
    # No key at all: the auth window (1 s here) ends it; so does any first frame but auth.
    ws = await open_socket(server, cid, "none")
    assert await close_code(ws) == 4001
    ws = await open_socket(server, cid, "none")
    await ws.send(json.dumps({"role": "user", "content": [{"type": "text", "text": "hi"}]}))
    assert await close_code(ws) == 4001
    ws = await connect(
        url(server, cid), additional_headers={"Authorization": f"Bearer {KEY}"}, proxy=None
    )
    assert await close_code(ws) == 4001

    unknown = "00000000-0000-4000-8000-000000000000"
    assert await close_code(await open_socket(server, unknown)) == 4004
    assert await close_code(await open_socket(server, "not-a-uuid")) == 4004
    assert await close_code(await open_socket(server, unknown, key="wrong")) == 4001  # no hint
    assert await close_code(await open_socket(server, cid, after_id="nonsense")) == 1008
    # A key given in the query never reaches the server's log (uvicorn logs websocket paths).
    assert "session_api_key" not in server.output() and KEY not in server.output()


# -- what the frames hold --------------------------------------------------------------------------


async def test_frames_are_the_stored_events_then_live_ones_and_deltas_only_live(
    server: ServerProcess, http: httpx.AsyncClient, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    cid = await create(http, llm, key, tmp_path, stream=True)
    think_steps(llm, key, 3)
    reader = Reader(await open_socket(server, cid, resend_all="true"))
    # The message that starts the run comes over the socket itself.
    await reader.ws.send(
        json.dumps({"role": "user", "content": [{"type": "text", "text": "go"}], "run": True})
    )
    items, body = await finished(http, cid)
    await reader.wait_count(len(items))
    await asyncio.sleep(0.2)  # nothing more may come
    await reader.close()

    assert is_full_state(reader.frames[0])
    stored = [f for f in reader.frames if is_stored(json.loads(f))]
    assert [json.loads(f) for f in stored] == items  # each once, in order
    assert all(f in body for f in stored)  # the very bytes search returns
    deltas = [e for e in reader.events() if e["kind"] == "StreamingDeltaEvent"]
    # Deltas carry ids and times (clients require them), never ids of the log.
    assert deltas and all(e["id"] and e["timestamp"] for e in deltas)
    assert not {e["id"] for e in deltas} & {e["id"] for e in items}
    # The run's end is a full_state snapshot after its last event.
    assert is_full_state(reader.frames[-1])
    assert json.loads(reader.frames[-1])["value"]["execution_status"] == "finished"
    assert not [e for e in items if e["kind"] == "StreamingDeltaEvent"]
    user = [e for e in items if e["kind"] == "MessageEvent" and e["source"] == "user"]
    assert user[0]["llm_message"]["content"][0]["text"] == "go"


async def test_a_poll_after_the_run_ended_shows_the_state_on_the_socket_again(
    server: ServerProcess, http: httpx.AsyncClient, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    """The OpenHands SDK takes a run's end only from a `full_state` frame that comes after its
    POST /run answered, polling the conversation each second meanwhile: a run that ended
    sooner is shown again at its next poll, not after the SDK's 30 s fallback."""
    think_steps(llm, key, 1)
    cid = await create(http, llm, key, tmp_path, message="go")
    await finished(http, cid)
    ws = await open_socket(server, cid)
    try:
        assert is_full_state(await asyncio.wait_for(ws.recv(), 10))  # the socket's first frame
        r = await http.get(f"/api/conversations/{cid}")
        assert r.status_code == 200 and r.json()["execution_status"] == "finished"
        again = await asyncio.wait_for(ws.recv(), 10)
        assert is_full_state(again) and json.loads(again)["value"]["execution_status"] == "finished"
    finally:
        await ws.close()


async def test_a_bad_client_frame_gets_a_server_error_and_the_socket_stays_open(
    server: ServerProcess, http: httpx.AsyncClient, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    cid = await create(http, llm, key, tmp_path)
    ws = await open_socket(server, cid)
    assert is_full_state(await asyncio.wait_for(ws.recv(), 10))
    bad: list[str | bytes] = [
        "not json",
        json.dumps({"role": "assistant", "content": [{"type": "text", "text": "x"}]}),
        json.dumps({"content": [{"type": "text", "text": "no role"}]}),
        json.dumps({"role": "user", "content": []}),
        json.dumps([1, 2]),
        b"\x00binary",
        "[" * 100_000,  # nested past Python's recursion limit
    ]
    for frame in bad:
        await ws.send(frame)
        error = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert error["kind"] == "ServerErrorEvent" and error["source"] == "environment", frame
        assert error["code"] == "InvalidFrame" and error["detail"] and error["id"]
    await ws.send(json.dumps({"role": "user", "content": [{"type": "text", "text": "still here"}]}))
    message = json.loads(await asyncio.wait_for(ws.recv(), 10))
    assert message["kind"] == "MessageEvent"
    assert message["llm_message"]["content"][0]["text"] == "still here"
    await ws.close()
    items, _ = await search(http, cid)
    assert items[-1] == message
    assert not [e for e in items if e["kind"] == "ServerErrorEvent"]  # errors are not stored


# -- resuming --------------------------------------------------------------------------------------


async def test_after_id_after_a_disconnect_mid_run_gives_exactly_the_missing_events(
    server: ServerProcess, http: httpx.AsyncClient, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    think_steps(llm, key, 20, delay=0.05)
    cid = await create(http, llm, key, tmp_path)
    reader = Reader(await open_socket(server, cid, resend_all="true"))
    await send(http, cid, "go", run=True)
    await reader.wait_count(12)
    await reader.close()
    first = reader.ids()
    assert (await http.get(f"/api/conversations/{cid}")).json()["execution_status"] == "running"

    await asyncio.sleep(0.3)  # the run goes on without a socket
    rest = Reader(await open_socket(server, cid, after_id=first[-1]))
    items, _ = await finished(http, cid)
    await rest.wait_count(len(items) - len(first))
    await asyncio.sleep(0.2)
    await rest.close()
    assert first + rest.ids() == [e["id"] for e in items]


async def test_fifty_subscribers_each_get_every_event_once(
    server: ServerProcess, http: httpx.AsyncClient, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    think_steps(llm, key, 10)
    cid = await create(http, llm, key, tmp_path)
    readers = [Reader(await open_socket(server, cid, resend_all="true")) for _ in range(50)]
    # Up to the limit (55 here) more may come; one more is turned away with 1013.
    extra = [Reader(await open_socket(server, cid)) for _ in range(5)]
    assert (await http.get("/server_info")).json()["websockets"] >= 55
    assert await close_code(await open_socket(server, cid)) == 1013

    await send(http, cid, "go", run=True)
    items, _ = await finished(http, cid)
    want = [e["id"] for e in items]
    for reader in readers:
        await reader.wait_count(len(want))
    await asyncio.sleep(0.2)
    for reader in readers:
        await reader.close()
        assert reader.ids() == want
    for reader in extra:
        await reader.close()


async def test_a_client_that_never_reads_is_closed_and_slows_nothing(
    server: ServerProcess, http: httpx.AsyncClient, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    think_steps(llm, key, 50, pad=2000)
    cid = await create(http, llm, key, tmp_path)
    # A small receive window, small segments (on loopback the kernel would otherwise buffer
    # megabytes for the server: its send buffer grows with the segment size), no compression
    # and a one-frame client queue: the server's socket fills after a few hundred KB.
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
    raw.connect(("127.0.0.1", server.port))
    stalled = await connect(
        url(server, cid, resend_all="true"),
        sock=raw,
        max_size=None,
        max_queue=1,
        compression=None,
        proxy=None,
        ping_interval=None,
        additional_headers={"X-Session-API-Key": KEY},
    )
    reader = Reader(await open_socket(server, cid, resend_all="true"))

    await send(http, cid, "go", run=True)
    items, _ = await finished(http, cid)
    want = [e["id"] for e in items]
    await reader.wait_count(len(want))  # the other subscriber got everything, in time
    assert reader.ids() == want

    # Now read what the stalled client was sent: a prefix, then 1013.
    got: list[str] = []
    with pytest.raises(ConnectionClosed) as closed:
        async with asyncio.timeout(30):
            while True:
                event = json.loads(await stalled.recv())
                if is_stored(event):
                    got.append(event["id"])
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
    print(f"stalled client got {len(got)} of {len(want)} events")
    assert 0 < len(got) < len(want) and got == want[: len(got)]
    assert f"after_id={got[-1]}" in closed.value.rcvd.reason
    # It resumes where it stopped.
    resumed = Reader(await open_socket(server, cid, after_id=got[-1]))
    await resumed.wait_count(len(want) - len(got))
    await resumed.close()
    await reader.close()
    assert got + resumed.ids() == want


async def test_a_client_behind_by_more_than_the_kernel_buffers_gets_1013_with_its_resume_point(
    tmp_path: Path,
) -> None:
    """Queues too large to ever overflow: only the time one frame waits for the socket
    (ws_send_timeout) can tell that the client stopped reading. Before, uvicorn's keepalive
    closed such a socket with 1011 after about 40 s, and the 1013 waited behind the backlog."""
    limits = {
        "AGENT_SERVER_WS_QUEUE_EVENTS": "100000",
        "AGENT_SERVER_WS_QUEUE_BYTES": str(1024**3),
        "AGENT_SERVER_WS_SEND_TIMEOUT": "1",
    }
    proc = ServerProcess(tmp_path / "state", env=limits).start()
    try:
        async with httpx.AsyncClient(
            base_url=proc.url, headers={"X-Session-API-Key": KEY}, timeout=30
        ) as http:
            r = await http.post(
                "/api/conversations",
                json={
                    "agent": {"llm": {"model": "m"}},
                    "workspace": {"working_dir": str(tmp_path)},
                },
            )
            cid = r.json()["id"]
            raw = socket.socket()
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
            raw.connect(("127.0.0.1", proc.port))
            stalled = await connect(
                url(proc, cid),
                sock=raw,
                max_size=None,
                max_queue=1,
                compression=None,
                proxy=None,
                ping_interval=None,
                additional_headers={"X-Session-API-Key": KEY},
            )
            for i in range(40):  # 8 MB: more than every buffer on the way holds
                await send(http, cid, f"{i:02d}" + "x" * 200_000)
            items, _ = await search(http, cid)
            want = [e["id"] for e in items if e["kind"] == "MessageEvent"]
            await asyncio.sleep(3)  # the send timeout passes; nothing reads meanwhile

            got: list[str] = []
            with pytest.raises(ConnectionClosed) as closed:
                async with asyncio.timeout(20):
                    while True:
                        frame = json.loads(await stalled.recv())
                        if frame.get("key") != "full_state":  # transient: no resume point
                            got.append(frame["id"])
        assert closed.value.rcvd is not None, "no close frame"
        assert closed.value.rcvd.code == 1013, closed.value.rcvd
        assert 0 < len(got) < len(want) and got == want[: len(got)]
        assert f"after_id={got[-1]}" in closed.value.rcvd.reason
        scrape = httpx.get(proc.url + "/metrics", headers={"X-Session-API-Key": KEY}).text
        assert 'agent_server_websocket_drops_total{reason="send_timeout"} 1.0' in scrape
    finally:
        proc.stop()


async def test_a_client_that_leaves_a_ping_unanswered_is_closed_with_1013_and_counted(
    tmp_path: Path,
) -> None:
    """A peer that never answers a ping (a raw socket that completed the handshake) is closed
    by the protocol, and /metrics' drop counter says so (issue 30.4: it counted only the
    route's own drops)."""
    proc = ServerProcess(tmp_path / "state", env={"AGENT_SERVER_WS_PING_INTERVAL": "0.5"}).start()
    try:
        async with httpx.AsyncClient(
            base_url=proc.url, headers={"X-Session-API-Key": KEY}, timeout=30
        ) as http:
            r = await http.post(
                "/api/conversations",
                json={
                    "agent": {"llm": {"model": "m"}},
                    "workspace": {"working_dir": str(tmp_path)},
                },
            )
            cid = r.json()["id"]
            reader, writer = await asyncio.open_connection("127.0.0.1", proc.port)
            writer.write(
                (
                    f"GET /sockets/events/{cid} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                    f"Sec-WebSocket-Version: 13\r\nX-Session-API-Key: {KEY}\r\n\r\n"
                ).encode()
            )
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 101"), head
            async with asyncio.timeout(30):  # read (pings too) but never answer: EOF is the close
                rest = await reader.read()
            writer.close()
            assert b"\x88" in rest and b"ping unanswered" in rest, rest[-200:]
            scrape = (await http.get("/metrics")).text
        assert 'agent_server_websocket_drops_total{reason="ping_timeout"} 1.0' in scrape, scrape
    finally:
        proc.stop()


async def test_streaming_deltas_are_masked_like_stored_events(
    server: ServerProcess, http: httpx.AsyncClient, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    body = {
        "agent": agent_spec(llm, key, stream=True),
        "workspace": {"working_dir": str(tmp_path)},
        "secrets": {"TOKEN": "hunter2-topsecret"},
    }
    r = await http.post("/api/conversations", json=body)
    cid = r.json()["id"]
    llm.script(key, Reply(text="the token is hunter2-topsecret ok"))
    reader = Reader(await open_socket(server, cid))
    await send(http, cid, "say it", run=True)
    await finished(http, cid)
    await asyncio.sleep(0.3)
    await reader.close()
    deltas = "".join(
        e["content"] or "" for e in reader.events() if e["kind"] == "StreamingDeltaEvent"
    )
    assert "the token is <secret-hidden> ok" == deltas  # split between deltas, masked whole
    assert "hunter2" not in deltas


async def test_a_running_commands_output_comes_live_masked_and_is_stored_once(
    server: ServerProcess, http: httpx.AsyncClient, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    """The terminal's lines as they come, on the transient path (StreamingDeltaEvents with the
    call's `tool_call_id` and `output`) to a socket that asks for them (`progress=true`; the
    others, such as the OpenHands SDK's, get deltas in SPEC 6.2's shape only): secrets masked,
    never stored, the observation holding the output once."""
    body = {
        "agent": agent_spec(llm, key, tools=["terminal"]),
        "workspace": {"working_dir": str(tmp_path)},
        "secrets": {"TOKEN": "hunter2-topsecret"},
    }
    r = await http.post("/api/conversations", json=body)
    cid = r.json()["id"]
    llm.script(
        key,
        call("terminal", command='for i in 1 2 3; do echo "line-$i $TOKEN"; done'),
        call("finish", message="done"),
    )
    reader = Reader(await open_socket(server, cid, progress="true"))
    plain = Reader(await open_socket(server, cid))
    await send(http, cid, "print lines", run=True)
    stored, raw = await finished(http, cid)
    deadline = time.monotonic() + 30
    while not all(
        any(e["kind"] == "ObservationEvent" for e in r.events()) for r in (reader, plain)
    ):
        assert time.monotonic() < deadline, "no observation on the sockets"
        await asyncio.sleep(0.02)
    await reader.close()
    await plain.close()
    assert not [e for e in plain.events() if e["kind"] == "StreamingDeltaEvent"]
    frames = reader.events()
    action = next(e for e in frames if e["kind"] == "ActionEvent" and e["tool_name"] == "terminal")
    live = [e for e in frames if e["kind"] == "StreamingDeltaEvent" and e["output"]]
    assert live and {e["tool_call_id"] for e in live} == {action["tool_call_id"]}
    assert all("content" in e and "reasoning_content" in e for e in live)
    # Sent before the observation, and only what the command printed (no model text in them).
    position = {id(e): i for i, e in enumerate(frames)}
    observation = next(e for e in frames if e["kind"] == "ObservationEvent")
    assert all(position[id(e)] < position[id(observation)] and e["content"] is None for e in live)
    output = "".join(e["output"] for e in live)
    assert [line for line in output.splitlines() if line.startswith("line-")] == [
        f"line-{i} <secret-hidden>" for i in (1, 2, 3)
    ]
    assert "hunter2" not in json.dumps(frames) and "hunter2" not in raw
    assert not [e for e in stored if e["kind"] == "StreamingDeltaEvent"]
    assert raw.count("line-2 <secret-hidden>") == 1  # the observation's, once


async def test_a_retried_model_call_is_said_to_progress_sockets_only(
    server: ServerProcess, http: httpx.AsyncClient, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    """Before each retry of a model call, a transient `llm_retry` state update (the error's
    class, the seconds until the next attempt): to sockets opened with `progress=true` only,
    never stored."""
    cid = await create(http, llm, key, tmp_path)
    llm.script(key, error(429, "slow down", retry_after=1), Reply(text="fine now"))
    reader = Reader(await open_socket(server, cid, progress="true"))
    plain = Reader(await open_socket(server, cid))
    await send(http, cid, "go", run=True)
    stored, _ = await finished(http, cid)
    deadline = time.monotonic() + 30
    while not all(
        any(e["kind"] == "MessageEvent" and e["source"] == "agent" for e in r.events())
        for r in (reader, plain)
    ):
        assert time.monotonic() < deadline, "no answer on the sockets"
        await asyncio.sleep(0.02)
    await reader.close()
    await plain.close()
    retries = [
        e
        for e in reader.events()
        if e["kind"] == "ConversationStateUpdateEvent" and e["key"] == "llm_retry"
    ]
    assert [r["value"] for r in retries] == [{"error": "RateLimitError", "retry_in": 1.0}]
    assert not [e for e in plain.events() if e.get("key") == "llm_retry"]
    assert not [e for e in stored if e.get("key") == "llm_retry"]
