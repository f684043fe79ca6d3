"""`POST /api/v1/app-conversations/{id}/llm`: a run that failed on a wrong model setting is
retried in place once the settings are fixed, with a real control plane, a process sandbox, the
gateway and the scripted LLM (litellm as it is)."""

from __future__ import annotations

import httpx

from tests.control_plane.support import (
    ControlPlane,
    configure_llm,
    conversation,
    start,
    whole_run,
)
from tests.support.llm import ScriptedLLM, text
from tests.support.wait import wait_for

#: Nothing listens there: every call of the run fails, and the run ends in ERROR.
UNREACHABLE = "http://127.0.0.1:9/v1"


def stored_error(client: httpx.Client, cid: str) -> bool:
    """The run's end is stored: its ConversationErrorEvent and the ERROR status after it."""
    r = client.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 100})
    items = r.json()["items"]
    return any(e["kind"] == "ConversationErrorEvent" for e in items) and any(
        e.get("key") == "execution_status" and e["value"] == "error" for e in items
    )


def test_a_failed_run_goes_on_with_the_settings_fixed(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    client = control_plane.client(control_plane.new_user("alice"))
    configure_llm(client, UNREACHABLE, tools=["terminal"])
    cid = start(client, "Say hello")["app_conversation_id"]
    base = f"/api/v1/app-conversations/{cid}"
    # The agent server retries the call (its backoff: some 20 s), then gives up; the record
    # says so before the webhook has stored the events.
    wait_for(lambda: stored_error(client, cid), 120, what="the error stored")
    assert conversation(client, cid)["execution_status"] == "error"
    before = client.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 100})
    earlier = [e["id"] for e in before.json()["items"]]

    # Bad input is 422 (SPEC 7), another user's conversation 404, and nothing changes.
    assert client.post(base + "/llm", json={"run": "soon"}).status_code == 422
    assert client.post(base + "/llm", json={"model": "x"}).status_code == 422
    other = control_plane.client(control_plane.new_user("mallory"))
    assert other.post(base + "/llm", json={}).status_code == 404
    # A user without a model has nothing to retry with.
    configure_llm(other, UNREACHABLE)
    task = start(other)  # idle
    assert other.patch("/api/v1/settings", json={"llm_model": None}).status_code == 200
    r = other.post(f"/api/v1/app-conversations/{task['app_conversation_id']}/llm", json={})
    assert r.status_code == 409 and "No language model" in r.text

    # The gateway has just read the wrong settings (a call of the sandbox's, by its token);
    # the base URL fixed and another model chosen in the settings, then at once the retry (the
    # gateway forgets what it read, which would otherwise hold for two seconds and fail the
    # run's first call): the same conversation goes on.
    sid = conversation(client, cid)["sandbox_id"]
    session = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["session_api_key"]
    me = client.get(
        "/api/v1/users/me",
        params={"expose_secrets": "true"},
        headers={"X-Session-API-Key": session},
    ).json()
    called = httpx.post(
        control_plane.url + "/api/v1/llm/chat/completions",
        headers={"Authorization": f"Bearer {me['llm_api_key']}"},
        json={"model": "test-model", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert called.status_code == 502, called.text  # nothing at the wrong base URL
    configure_llm(client, llm.base_url(key), tools=["terminal"], llm_model="openai/other-model")
    llm.script(key, text("Hello again"))
    r = client.post(base + "/llm")  # no body: run again
    assert r.status_code == 200, r.text
    wait_for(
        lambda: conversation(client, cid)["execution_status"] == "finished", 60, what="the run"
    )
    assert llm.requests_for(key)[-1]["model"] == "other-model"
    wait_for(lambda: whole_run(client, cid), 30, what="the run's events stored")
    after = client.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 100})
    items = after.json()["items"]
    assert [e["id"] for e in items][: len(earlier)] == earlier  # the failed run's events kept
    switched = [e for e in items if e.get("key") == "llm"]
    assert switched and switched[-1]["value"]["model"] == "openai/other-model"
    assert "sk-test-key" not in after.text  # the sandbox has its token, never the user's key
    said = [e for e in items if e["kind"] == "MessageEvent" and e["source"] == "agent"]
    assert said[-1]["llm_message"]["content"][0]["text"] == "Hello again"
    assert conversation(client, cid)["llm_model"] == "openai/other-model"
