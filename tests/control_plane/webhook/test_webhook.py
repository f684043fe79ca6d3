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
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e


def message(i: int) -> dict[str, Any]:
    return {
        "id": f"01J{i:023d}",
        "timestamp": "2026-01-01T00:00:00+00:00",
        "source": "user",
        "kind": "MessageEvent",
        "llm_message": {"role": "user", "content": [{"type": "text", "text": f"m{i}"}]},
    }


STATS = {
    "id": "01JSTATS000000000000000000",
    "kind": "ConversationStateUpdateEvent",
    "source": "environment",
    "key": "stats",
    "value": {
        "usage_to_metrics": {
            "default": {
                "accumulated_cost": 0.25,
                "response_count": 2,
                "accumulated_token_usage": {"prompt_tokens": 100, "completion_tokens": 7},
            },
            "condenser": {
                "accumulated_cost": 0.5,
                "response_count": 1,
                "accumulated_token_usage": {"prompt_tokens": 10},
            },
        }
    },
}


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
        count: int = r.json()
        return count

    batch = [message(i) for i in range(5)]
    assert post(batch, None).status_code == 401
    assert post(batch, "sk-sandbox-unknown").status_code == 401
    api_key = control_plane.new_user("mallory")
    assert post(batch, api_key).status_code == 401  # an account key is not a session key
    # Another sandbox's conversation: answered as an unknown one is, and dropped (below: 0).
    assert post(batch, other_key).status_code == 200
    assert (
        post(batch, url=f"{control_plane.url}/api/v1/webhooks/events/not-a-uuid").status_code == 422
    )

    for bad in (
        {"not": "an array"},
        [{"kind": "NoSuchEvent", "source": "user"}],
        [{**message(1), "surprise": True}],
        [{"kind": "MessageEvent"}],
    ):
        r = post(bad)
        assert r.status_code == 422, r.text
        assert all({"loc", "msg", "type"} <= set(item) for item in r.json()["detail"])
    assert stored() == 0

    r = post(batch)
    assert r.status_code == 200 and r.json() == {"success": True}
    assert stored() == 5
    assert post(batch).status_code == 200 and post(batch[2:] + [message(5)]).status_code == 200
    assert stored() == 6  # replays change nothing; only the new event was added
    items = client.get(
        f"/api/v1/conversation/{cid}/events/search", params={"kind__eq": "MessageEvent", "limit": 4}
    ).json()
    assert [e["id"] for e in items["items"]] == [message(i)["id"] for i in range(4)]
    rest = client.get(
        f"/api/v1/conversation/{cid}/events/search",
        params={"kind__eq": "MessageEvent", "page_id": items["next_page_id"]},
    ).json()
    assert [e["id"] for e in rest["items"]] == [message(i)["id"] for i in (4, 5)]

    before = conversation(client, cid)["last_activity_at"]
    assert post([STATS]).status_code == 200
    record = conversation(client, cid)
    assert record["metrics"]["accumulated_cost"] == 0.75
    assert record["metrics"]["accumulated_token_usage"]["prompt_tokens"] == 110
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


def running_sandbox(client: httpx.Client) -> dict[str, Any]:
    sid = client.post("/api/v1/sandboxes", json={}).json()["id"]
    found: dict[str, Any] = wait_for(
        lambda: (
            (s := client.get("/api/v1/sandboxes", params={"id": sid}).json()[0])["status"]
            == "RUNNING"
            and s
        ),
        60,
        what="RUNNING",
    )
    return found


def test_a_conversation_made_on_the_agent_server_is_the_sandbox_user_s(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    """Issue 26: events of a conversation this control plane did not start (the Cloud
    workspace makes it straight on the agent server) are stored under a record owned by the
    sandbox's user; its conversation info fills the record in; another sandbox cannot post for
    it; a conversation deleted here is not brought back by what its sandbox still sends."""
    alice = control_plane.client(control_plane.new_user("alice"))
    bob = control_plane.client(control_plane.new_user("bob"))
    configure_llm(alice, llm.base_url(key))
    sandbox, other = running_sandbox(alice), running_sandbox(alice)
    own, foreign = sandbox["session_api_key"], other["session_api_key"]
    cid = str(uuid.uuid4())
    base = f"{control_plane.url}/api/v1/webhooks"

    r = httpx.post(
        f"{base}/events/{cid}", json=[message(1), message(2)], headers={"X-Session-API-Key": own}
    )
    assert r.status_code == 200, r.text
    record = alice.get("/api/v1/app-conversations", params={"ids": cid}).json()[0]
    assert record is not None, "the conversation is shown to the sandbox's user"
    assert record["created_by_user_id"] == alice.get("/api/v1/users/me").json()["id"]
    assert record["sandbox_id"] == sandbox["id"] and record["trigger"] is None
    assert record["working_dir"] == "/workspace/project"
    assert alice.get(f"/api/v1/conversation/{cid}/events/count").json() == 2
    assert bob.get("/api/v1/app-conversations", params={"ids": cid}).json() == [None]
    # Another sandbox cannot post for it, nor tell it exists: answered as its own would be.
    assert (
        httpx.post(
            f"{base}/events/{cid}", json=[message(3)], headers={"X-Session-API-Key": foreign}
        ).status_code
        == 200
    )
    assert alice.get(f"/api/v1/conversation/{cid}/events/count").json() == 2

    info = {
        "id": cid,
        "execution_status": "finished",
        "title": "made on the agent server",
        "tags": {"automationrunid": "r1"},
        "agent": {"llm": {"model": "openai/own-model"}},
        "workspace": {"working_dir": "/workspace/project"},
        "stats": STATS["value"],
    }
    assert (
        httpx.post(
            f"{base}/conversations", json=info, headers={"X-Session-API-Key": foreign}
        ).status_code
        == 200
    )
    assert alice.get("/api/v1/app-conversations", params={"ids": cid}).json()[0]["title"] is None
    assert httpx.post(f"{base}/conversations", json=info).status_code == 401
    assert (
        httpx.post(
            f"{base}/conversations", json={"id": "nope"}, headers={"X-Session-API-Key": own}
        ).status_code
        == 422
    )
    r = httpx.post(f"{base}/conversations", json=info, headers={"X-Session-API-Key": own})
    assert r.status_code == 200 and r.json() == {"success": True}
    record = alice.get("/api/v1/app-conversations", params={"ids": cid}).json()[0]
    assert (record["title"], record["llm_model"], record["tags"]) == (
        "made on the agent server",
        "openai/own-model",
        {"automationrunid": "r1"},
    )
    assert record["metrics"]["accumulated_cost"] == 0.75
    # Stats are the sandbox's word, which its code can forge: held to bounds, never a 500.
    forged = {
        "usage_to_metrics": {
            "a": {"accumulated_cost": 1e308, "accumulated_token_usage": {"prompt_tokens": 10**30}},
            "b": {"accumulated_cost": 1e308, "accumulated_token_usage": {"prompt_tokens": "many"}},
            "c": {"accumulated_cost": "free", "accumulated_token_usage": ["not", "a", "dict"]},
            "d": {"accumulated_cost": -5, "accumulated_token_usage": {"completion_tokens": -7}},
        }
    }
    r = httpx.post(
        f"{base}/conversations", json={**info, "stats": forged}, headers={"X-Session-API-Key": own}
    )
    assert r.status_code == 200, r.text
    metrics = alice.get("/api/v1/app-conversations", params={"ids": cid}).json()[0]["metrics"]
    assert metrics["accumulated_cost"] == 1e6
    assert metrics["accumulated_token_usage"]["prompt_tokens"] == 10**12
    assert metrics["accumulated_token_usage"]["completion_tokens"] == 0
    deleting = {**info, "execution_status": "deleting", "title": "other"}
    assert (
        httpx.post(
            f"{base}/conversations", json=deleting, headers={"X-Session-API-Key": own}
        ).status_code
        == 200
    )
    assert (
        alice.get("/api/v1/app-conversations", params={"ids": cid}).json()[0]["title"]
        == "made on the agent server"
    )
    found = alice.get(
        "/api/v1/app-conversations/search", params={"sandbox_id__eq": sandbox["id"]}
    ).json()["items"]
    assert [c["id"] for c in found] == [cid]

    # Deleted here: what its sandbox sends afterwards is dropped, never a new record.
    started = start(alice)
    gone = started["app_conversation_id"]
    started_key = alice.get("/api/v1/sandboxes", params={"id": started["sandbox_id"]}).json()[0][
        "session_api_key"
    ]
    assert alice.delete(f"/api/v1/app-conversations/{gone}").status_code == 200
    for url, body in (
        (f"{base}/events/{gone}", [message(9)]),
        (f"{base}/conversations", {**info, "id": gone}),
    ):
        assert (
            httpx.post(url, json=body, headers={"X-Session-API-Key": started_key}).status_code
            == 200
        )
    assert alice.get("/api/v1/app-conversations", params={"ids": gone}).json() == [None]
