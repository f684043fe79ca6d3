"""What a sandbox posts, as a hostile one would post it, on both backends: an event id that
would forge frames of the live stream, or one too long for the store, is the same 422 on SQLite
and PostgreSQL (never a 503 that makes the agent server send it for ever), and nothing of the
batch is stored; a frame is written so that no stored field can break out of it."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from control_plane.crypto import Cipher, hash_key
from control_plane.models import EventFilters, SandboxStatus
from control_plane.relay import Bell, relay
from control_plane.store import Database, accounts, conversations, events, sandboxes
from control_plane.webhook import WebhookReceiver
from tests.control_plane.support import ControlPlane, make_config
from web.errors import InvalidInput, LimitReached

pytestmark = pytest.mark.e2e  # a real PostgreSQL server

KEY = "sk-sandbox-ingest"
FORGED = "x\nevent: gone\ndata: {}"


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url)
    await database.migrate()
    yield database
    await database.close()


async def a_conversation(db: Database, user_name: str = "tenant") -> str:
    """A RUNNING sandbox known by KEY, with one conversation; its id."""
    user = await accounts.get_or_create_user(db, user_name)
    cid = str(uuid.uuid4())
    async with db.begin() as conn:
        await sandboxes.insert(
            conn,
            db.now(),
            id="s1",
            user_id=user.id,
            spec_id="process",
            status=SandboxStatus.RUNNING.value,
            session_key_hash=hash_key(KEY),
            session_key_enc="x",
            root_dir="/nowhere/s1",
        )
        await conversations.insert(
            conn, db.now(), id=cid, user_id=user.id, sandbox_id="s1", working_dir="/w"
        )
    return cid


def message(event_id: str) -> dict[str, Any]:
    return {
        "id": event_id,
        "timestamp": "2026-01-01T00:00:00+00:00",
        "source": "user",
        "kind": "MessageEvent",
        "llm_message": {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    }


@pytest.mark.asyncio
@pytest.mark.parametrize("bad", [FORGED, "a" * 65, "01J00000000000000000000000\n", ""])
async def test_an_event_id_that_is_no_id_is_the_same_422_on_both_backends(
    db: Database, bad: str
) -> None:
    cid = await a_conversation(db)
    receiver = WebhookReceiver(db, Cipher(Fernet.generate_key()))
    sender = await receiver.sender({"x-session-api-key": KEY})
    good = message(str(uuid.uuid4()))
    with pytest.raises(InvalidInput) as refused:
        await receiver.receive(sender, cid, json.dumps([good, message(bad)]).encode())
    assert [(e["loc"], e["input"]) for e in refused.value.errors] == [(["body", 1, "id"], bad)]
    assert await events.count(db, cid, EventFilters()) == 0  # nothing of the batch

    assert (
        await receiver.receive(
            sender, cid, json.dumps([good, message("01JZZZZZZZZZZZZZZZZZZZZZZZ")]).encode()
        )
        == 2
    )  # a ULID, a UUID


@pytest.mark.asyncio
async def test_no_stored_field_breaks_out_of_its_frame(db: Database) -> None:
    """A row stored before ids were checked, with a body whose text holds line breaks: its
    frame carries the body back whole as data, and no other field (no `event: gone`)."""
    cid = await a_conversation(db)
    body = json.dumps({"kind": "MessageEvent", "text": "one\r\ntwo"}).replace("\\r\\n", "\r\n")
    await events.insert_batch(
        db,
        [
            {
                "conversation_id": cid,
                "event_id": FORGED,
                "kind": "MessageEvent",
                "source": "user",
                "timestamp": None,
                "body": body,
            }
        ],
    )

    async def still_there() -> bool:
        return True

    stream = relay(db, Bell(), cid, 0, still_there)
    assert await anext(stream) == b"retry: 2000\n\n"
    written = (await anext(stream)).decode()
    await stream.aclose()
    fields = [line.partition(": ")[::2] for line in written.split("\n")[:-2]]
    assert [name for name, _ in fields] == ["data", "data"]  # no id, no event, nothing else
    assert "\r\n".join(value for _, value in fields) == body


def test_text_postgresql_cannot_keep_is_the_same_422_on_both_backends(
    database_url: str, tmp_path: Path
) -> None:
    """A NUL in a title (kept in a text column, which PostgreSQL refuses it in) or in a title
    search: 422 on both backends, nothing changed; tags (JSON) keep it on both."""
    plane = ControlPlane(make_config(tmp_path / "cp", database_url)).start()
    try:
        client = plane.client(plane.new_user("tenant"))

        async def placed() -> str:
            db = Database(database_url)
            try:
                cid = await a_conversation(db)
                async with db.begin() as conn:
                    await conversations.mark_started(conn, cid, db.now())
                return cid
            finally:
                await db.close()

        cid = asyncio.run(placed())
        r = client.patch(f"/api/v1/app-conversations/{cid}", json={"title": "a\u0000b"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "title"], r.text
        r = client.get("/api/v1/app-conversations/search", params={"title__contains": "\x00"})
        assert r.status_code == 422, r.text
        r = client.post("/api/v1/app-conversations", json={"title": "\u0000"})
        assert r.status_code == 422, r.text
        r = client.patch(
            f"/api/v1/app-conversations/{cid}", json={"title": "kept", "tags": {"k": "a\u0000b"}}
        )
        assert r.status_code == 200, r.text
        assert r.json()["title"] == "kept" and r.json()["tags"] == {"k": "a\u0000b"}
    finally:
        plane.stop()


@pytest.mark.asyncio
async def test_conversations_made_on_a_sandbox_are_recorded_up_to_its_cap(db: Database) -> None:
    """Each new conversation id a sandbox posts for becomes a record of its user: without a
    cap, one sandbox could fill the store. With one recorded and a cap of three, ten posted at
    once: two are recorded, the rest refused (429, kept by the agent server), nothing stored."""
    first = await a_conversation(db)  # recorded without a start task, as the webhook does
    receiver = WebhookReceiver(db, Cipher(Fernet.generate_key()), cap=3)
    sender = await receiver.sender({"x-session-api-key": KEY})
    made = [str(uuid.uuid4()) for _ in range(10)]
    outcomes = await asyncio.gather(
        *(
            receiver.receive(sender, cid, json.dumps([message(str(uuid.uuid4()))]).encode())
            for cid in made[:9]
        ),
        receiver.conversation(sender, json.dumps({"id": made[9], "title": "t"}).encode()),
        return_exceptions=True,
    )
    refused = [o for o in outcomes if isinstance(o, LimitReached)]
    assert len(refused) == 8 and all(
        not isinstance(o, BaseException) or o in refused for o in outcomes
    ), outcomes
    recorded = [cid for cid in made if await conversations.get(db, cid) is not None]
    assert len(recorded) == 2 and await conversations.get(db, first) is not None
    for cid in set(made) - set(recorded):
        assert await events.count(db, cid, EventFilters()) == 0
    # Known ones go on being stored.
    assert (
        await receiver.receive(
            sender, recorded[0], json.dumps([message(str(uuid.uuid4()))]).encode()
        )
        == 1
    )
