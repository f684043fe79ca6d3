"""The control plane's client of agent servers, against a real HTTP server on loopback whose
connection breaks as a kept-alive one does when the server closes it just as it is reused."""

from __future__ import annotations

import asyncio
import json

import pytest

from control_plane.agent_client import AgentClient, AgentError, Target

pytestmark = pytest.mark.asyncio


class Dropping:
    """An agent server that closes the first `drops` connections once it has read a request,
    without an answer, then answers each creation with the conversation it names."""

    def __init__(self, drops: int) -> None:
        self.drops = drops
        self.requests = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        body = json.loads(await reader.readexactly(length))
        self.requests += 1
        if self.requests <= self.drops:
            writer.close()
            return
        answer = json.dumps({"id": body["conversation_id"]}).encode()
        writer.write(
            b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(answer), answer)
        )
        await writer.drain()
        writer.close()


async def test_a_creation_whose_connection_broke_is_made_once_more() -> None:
    client = AgentClient(timeout=5)
    try:
        dropping = Dropping(drops=1)
        async with dropping as url:
            made = await client.create_conversation(Target(url, "k"), {"conversation_id": "c1"})
        assert made == {"id": "c1"} and dropping.requests == 2
    finally:
        await client.close()


async def test_a_server_that_never_answers_is_told_after_three_tries() -> None:
    client = AgentClient(timeout=5)
    try:
        dropping = Dropping(drops=10)
        async with dropping as url:
            with pytest.raises(AgentError, match="could not be reached") as raised:
                await client.create_conversation(Target(url, "k"), {"conversation_id": "c1"})
        assert raised.value.status is None and dropping.requests == 3
    finally:
        await client.close()
