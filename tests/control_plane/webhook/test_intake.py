"""The webhook's intake under a sender that sends too much at once (issue 25.4): a sandbox with
its batches in flight already, or batches whose bytes would pass what the control plane holds at
once, is told to send again later (429, Retry-After) before any of its body is read; what it was
admitted is stored, and the refused batch goes through when sent again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.control_plane.support import ControlPlane, configure_llm, make_config, start
from tests.support.llm import ScriptedLLM
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

BUDGET = 1_000_000


def message(i: int) -> dict[str, Any]:
    return {
        "id": f"01K{i:023d}",
        "timestamp": "2026-01-01T00:00:00+00:00",
        "source": "user",
        "kind": "MessageEvent",
        "llm_message": {"role": "user", "content": [{"type": "text", "text": f"m{i}"}]},
    }


class Upload:
    """A batch sent over a connection of its own, its body stopped after the first bytes until
    `finish()`: a request in flight. Only a refusal is answered before the body is whole, so
    `answered` tells whether it was refused."""

    def __init__(self, url: str, session: str, i: int, size: int) -> None:
        self.url = httpx.URL(url)
        self.session = session
        text = json.dumps([message(i)]).encode()
        self.body = text + b" " * (size - len(text))

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.url.host, self.url.port)
        head = (
            f"POST {self.url.path} HTTP/1.1\r\nHost: {self.url.host}\r\n"
            f"X-Session-API-Key: {self.session}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(self.body)}\r\nConnection: close\r\n\r\n"
        )
        self.writer.write(head.encode() + self.body[:10])
        await self.writer.drain()
        self.answer = asyncio.create_task(self.reader.read())

    @property
    def answered(self) -> bool:
        return self.answer.done()

    async def reopen(self) -> None:
        """Sent again, when refused."""
        if self.answered:
            assert b" 429 " in self.answer.result().split(b"\r\n")[0]
            self.writer.close()
            await self.open()

    async def finish(self) -> int:
        self.writer.write(self.body[10:])
        await self.writer.drain()
        status = int((await self.answer).split(b" ")[1])
        self.writer.close()
        return status


def test_too_much_at_once_is_told_to_wait(tmp_path: Path, llm: ScriptedLLM, key: str) -> None:
    plane = ControlPlane(make_config(tmp_path / "cp", webhook_bytes_in_flight=BUDGET)).start()
    try:
        client = plane.client(plane.new_user("loud"))
        configure_llm(client, llm.base_url(key))
        task = start(client)
        cid, sid = task["app_conversation_id"], task["sandbox_id"]
        sandbox = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
        session = sandbox["session_api_key"]
        # The sandbox's own server sends the new conversation's first events as a batch of this
        # sandbox: delivered before the flood, so every batch in flight below is the test's own.
        with httpx.Client(
            base_url=sandbox["exposed_urls"][0]["url"],
            timeout=30,
            headers={"X-Session-API-Key": session},
        ) as agent:
            wait_for(
                lambda: agent.get(f"/api/conversations/{cid}").json()["webhook"]["pending"] == 0,
                60,
                what="the conversation's first events delivered",
            )
        asyncio.run(flood(plane.url, cid, session))
        stored = {
            e["id"]
            for e in client.get(
                f"/api/v1/conversation/{cid}/events/search",
                params={"kind__eq": "MessageEvent", "limit": 1000},
            ).json()["items"]
        }
        assert {message(i)["id"] for i in range(1, 9)} <= stored  # each refused one sent again
    finally:
        plane.stop()


async def flood(base: str, cid: str, session: str) -> None:
    url = f"{base}/api/v1/webhooks/events/{cid}"
    async with httpx.AsyncClient(headers={"X-Session-API-Key": session}, timeout=60) as client:

        async def refused(i: int, size: int = 0) -> bool:
            """Whether a batch sent now is told to wait."""
            body = json.dumps([message(i)]).encode()
            r = await client.post(url, content=body + b" " * max(size - len(body), 0))
            if r.status_code == 429:
                assert r.headers["retry-after"] == "1" and "later" in r.json()["detail"]
                return True
            assert r.status_code == 200, r.text
            return False

        async def until_refused(uploads: list[Upload], i: int, size: int = 0) -> None:
            """Probes (each admitted one stored as its own event) until one is refused, the
            uploads sent again meanwhile if a probe came first."""
            for n in range(100):
                if await refused(i + 100 * n, size):
                    return
                for upload in uploads:
                    await upload.reopen()
            raise AssertionError("never refused")

        # Bytes: one large batch in flight; another large one waits, a small one goes.
        big = Upload(url, session, 1, 900_000)
        await big.open()
        await until_refused([big], 2, 200_000)
        assert not await refused(3)
        assert await big.finish() == 200
        assert not await refused(2, 200_000)  # sent again: taken now

        # Batches: four of this sandbox in flight; a fifth waits.
        small = [Upload(url, session, 4 + i, 100) for i in range(4)]
        for upload in small:
            await upload.open()
        await until_refused(small, 8)
        assert [await upload.finish() for upload in small] == [200] * 4
        assert not await refused(8)
