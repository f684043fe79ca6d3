"""The webhook receiver (SPEC 4.5): session-key auth, the agent server's schema, idempotent
inserts, a sandbox posting only for its own conversations, and 5xx when storage fails."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from control_plane.store import Database
from tests.control_plane.support import ControlPlane, configure_llm, conversation, start
from tests.support.llm import ScriptedLLM

pytestmark = pytest.mark.e2e


def message(i: int) -> dict[str, Any]:
    return {"id": f"01J{i:023d}", "timestamp": "2026-01-01T00:00:00+00:00", "source": "user",
            "kind": "MessageEvent",
            "llm_message": {"role": "user", "content": [{"type": "text", "text": f"m{i}"}]}}


STATS = {"id": "01JSTATS000000000000000000", "kind": "ConversationStateUpdateEvent",
         "source": "environment", "key": "stats", "value": {"usage_to_metrics": {
             "default": {"accumulated_cost": 0.25, "response_count": 2,
                         "accumulated_token_usage": {"prompt_tokens": 100, "completion_tokens": 7}},
             "condenser": {"accumulated_cost": 0.5, "response_count": 1,
                           "accumulated_token_usage": {"prompt_tokens": 10}}}}}


def test_webhook(control_plane: ControlPlane, llm: ScriptedLLM, key: str) -> None:
    client = control_plane.client(control_plane.new_user("alice"))
    configure_llm(client, llm.base_url(key))
    first = start(client)  # no initial message: the agent stays idle
    second = start(client)
    cid, sid = first["app_conversation_id"], first["sandbox_id"]
    assert second["sandbox_id"] != sid  # NO_GROUPING: a sandbox each
    sandboxes = client.get("/api/v1/sandboxes", params={"id": [sid, second["sandbox_id"]]}).json()
    own_key, other_key = sandboxes[0]["session_api_key"], sandboxes[1]["session_api_key"]
    hook = f"{control_plane.url}/api/v1/webhooks/events/{cid}"

    def post(body: Any, session: str | None = own_key, url: str = hook) -> httpx.Response:
        headers = {"X-Session-API-Key": session} if session else {}
        return httpx.post(url, json=body, headers=headers)

    def stored(kind: str = "MessageEvent") -> int:
        r = client.get(f"/api/v1/conversation/{cid}/events/count", params={"kind__eq": kind})
        count: int = r.json()["count"]
        return count

    batch = [message(i) for i in range(5)]
    assert post(batch, None).status_code == 401
    assert post(batch, "sk-sandbox-unknown").status_code == 401
    api_key = control_plane.new_user("mallory")
    assert post(batch, api_key).status_code == 401  # an account key is not a session key
    assert post(batch, other_key).status_code == 403  # another sandbox's conversation
    assert post(batch, url=f"{control_plane.url}/api/v1/webhooks/events/not-a-uuid").status_code == 422
    assert post(batch, url=f"{control_plane.url}/api/v1/webhooks/events/{uuid.uuid4()}").status_code == 404

    for bad in ({"not": "an array"}, [{"kind": "NoSuchEvent", "source": "user"}],
                [{**message(1), "surprise": True}], [{"kind": "MessageEvent"}]):
        r = post(bad)
        assert r.status_code == 422, r.text
        assert all({"loc", "msg", "type"} <= set(item) for item in r.json()["detail"])
    assert stored() == 0

    r = post(batch)
    assert r.status_code == 200 and r.json() == {"success": True}
    assert stored() == 5
    assert post(batch).status_code == 200 and post(batch[2:] + [message(5)]).status_code == 200
    assert stored() == 6  # replays change nothing; only the new event was added
    items = client.get(f"/api/v1/conversation/{cid}/events/search",
                       params={"kind__eq": "MessageEvent", "limit": 4}).json()
    assert [e["id"] for e in items["items"]] == [message(i)["id"] for i in range(4)]
    rest = client.get(f"/api/v1/conversation/{cid}/events/search",
                      params={"kind__eq": "MessageEvent", "page_id": items["next_page_id"]}).json()
    assert [e["id"] for e in rest["items"]] == [message(i)["id"] for i in (4, 5)]

    before = conversation(client, cid)["last_activity_at"]
    assert post([STATS]).status_code == 200
    record = conversation(client, cid)
    assert record["metrics"]["accumulated_cost"] == 0.75
    assert record["metrics"]["prompt_tokens"] == 110 and record["metrics"]["response_count"] == 3
    assert record["last_activity_at"] > before

    # Storage fails: 5xx (the agent server sends the batch again), never a 200 that loses it.
    async def break_storage() -> None:
        db = Database(control_plane.config.db_url)
        async with db.begin() as conn:
            await conn.execute(text("ALTER TABLE events RENAME TO events_away"))
        await db.close()
    asyncio.run(break_storage())
    r = post([message(7)])
    assert r.status_code == 503 and "again" in r.json()["detail"]
