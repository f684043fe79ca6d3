"""The conversation tree of SPEC 6.1: parent ids, HEAD, navigate, branches (issue 12)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.conftest import create
from tests.support.api import events, send, wait_status
from tests.support.llm import ScriptedLLM, text
from tests.support.server import ServerProcess

STATE = "ConversationStateUpdateEvent"


def info(client: httpx.Client, cid: str) -> dict[str, Any]:
    r = client.get(f"/api/conversations/{cid}")
    assert r.status_code == 200, r.text
    return r.json()


def user_texts(request: dict[str, Any]) -> list[str]:
    return [m["content"][0]["text"] for m in request["messages"] if m["role"] == "user"]


def test_parents_are_the_head_and_state_updates_hang_off_it(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, text("one"), text("two"))
    conv = create(client, llm, key, tmp_path)
    cid = conv["id"]
    assert conv["leaf_event_id"] and conv["last_user_message_id"] is None
    for message in ("first", "second"):
        send(client, cid, message)
        assert wait_status(client, cid, "finished") == "finished"
    stored = events(client, cid)
    head, wrong = None, []
    for e in stored:
        if e["parent_id"] != head:
            wrong.append((e["kind"], e["parent_id"], head))
        if e["kind"] != STATE:
            head = e["id"]
    assert not wrong and sum(e["parent_id"] is None for e in stored) == 1
    now = info(client, cid)
    assert now["leaf_event_id"] == head and not now["head_is_empty"]
    users = [e for e in stored if e["kind"] == "MessageEvent" and e["source"] == "user"]
    assert now["last_user_message_id"] == users[-1]["id"]
    assert now["persistence_dir"] and now["stats"]["usage_to_metrics"]


def test_navigate_starts_a_sibling_branch_the_model_follows(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, server: ServerProcess
) -> None:
    llm.script(key, text("answer one"), text("answer two"), text("answer three"))
    cid = create(client, llm, key, tmp_path)["id"]
    send(client, cid, "question one")
    assert wait_status(client, cid, "finished") == "finished"
    first_answer = [e for e in events(client, cid, "MessageEvent") if e["source"] == "agent"][0]
    send(client, cid, "question two")
    assert wait_status(client, cid, "finished") == "finished"
    before = events(client, cid)

    r = client.post(f"/api/conversations/{cid}/navigate", json={"event_id": first_answer["id"]})
    assert r.status_code == 200, r.text
    assert r.json()["leaf_event_id"] == first_answer["id"]
    # Across a restart HEAD stays where the navigate put it.
    server.stop()
    server.start()
    assert info(client, cid)["leaf_event_id"] == first_answer["id"]

    send(client, cid, "question three")
    assert wait_status(client, cid, "finished") == "finished"
    after = events(client, cid)
    assert after[: len(before)] == before  # every branch stays
    new_user = [e for e in after[len(before) :] if e["kind"] == "MessageEvent"][0]
    assert new_user["parent_id"] == first_answer["id"]
    # The model saw the new branch only: question two is not in it.
    assert user_texts(llm.requests_for(key)[-1]) == ["question one", "question three"]

    branch = events(client, cid, branch="head")
    assert [e["kind"] for e in branch if e["kind"] == "MessageEvent"] == ["MessageEvent"] * 4
    assert "question two" not in str(branch)
    old = [e for e in before if e["kind"] != STATE][-1]
    assert "question two" in str(events(client, cid, branch=old["id"]))

    r = client.post(f"/api/conversations/{cid}/navigate", json={"event_id": None})
    assert r.status_code == 200 and r.json()["head_is_empty"] and r.json()["leaf_event_id"] is None
    assert events(client, cid, branch="head") == []
    assert (
        client.post(f"/api/conversations/{cid}/navigate", json={"event_id": "0" * 26}).status_code
        == 404
    )
    assert (
        client.get(f"/api/conversations/{cid}/events/search", params={"branch": "nope"}).status_code
        == 422
    )
    # An unknown branch is a 404 as navigate answers, not an empty page (issue 30.4).
    for route in ("search", "count"):
        r = client.get(f"/api/conversations/{cid}/events/{route}", params={"branch": "0" * 26})
        assert r.status_code == 404, r.text
    # An empty body is refused, not read as a move to the empty tree (issue 30.4).
    assert client.post(
        f"/api/conversations/{cid}/navigate", json={"event_id": old["id"]}
    ).is_success
    r = client.post(f"/api/conversations/{cid}/navigate", json={})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "event_id"], r.text
    assert info(client, cid)["leaf_event_id"] == old["id"]


def test_fork_copies_the_history_or_one_branch_and_runs_on_its_own(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, text("answer one"), text("answer two"), text("fork answer"))
    cid = create(client, llm, key, tmp_path, title="source")["id"]
    for message in ("question one", "question two"):
        send(client, cid, message)
        assert wait_status(client, cid, "finished") == "finished"
    source = events(client, cid)

    r = client.post(f"/api/conversations/{cid}/fork", json={"title": "whole"})
    assert r.status_code == 201, r.text
    whole = r.json()
    assert whole["id"] != cid and whole["execution_status"] == "idle"
    assert whole["forked_from_conversation_id"] == cid and whole["title"] == "whole"
    assert whole["leaf_event_id"] == info(client, cid)["leaf_event_id"]
    assert whole["metrics"]["accumulated_token_usage"]["prompt_tokens"] == 0  # reset_metrics
    assert events(client, whole["id"]) == source

    answer = [e for e in source if e["kind"] == "MessageEvent" and e["source"] == "agent"][0]
    r = client.post(f"/api/conversations/{cid}/fork", json={"from_event_id": answer["id"]})
    assert r.status_code == 201, r.text
    branch = r.json()
    copied = events(client, branch["id"])
    assert [e["kind"] for e in copied] == ["SystemPromptEvent", "MessageEvent", "MessageEvent"]
    assert copied[-1] == answer and branch["leaf_event_id"] == answer["id"]
    assert branch["forked_from_event_id"] == answer["id"]
    # The fork keeps the LLM key: it runs, on its branch only.
    send(client, branch["id"], "question on the fork")
    assert wait_status(client, branch["id"], "finished") == "finished"
    assert user_texts(llm.requests_for(key)[-1]) == ["question one", "question on the fork"]
    assert len(events(client, cid)) == len(source)  # the source is untouched

    taken = client.post(f"/api/conversations/{cid}/fork", json={"id": branch["id"]})
    assert taken.status_code == 409
    assert (
        client.post(f"/api/conversations/{cid}/fork", json={"from_event_id": "0" * 26}).status_code
        == 404
    )


def test_ask_agent_security_analyzer_and_plugins(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, text("hello back"), text("you said hello"))
    cid = create(client, llm, key, tmp_path)["id"]
    send(client, cid, "hello")
    assert wait_status(client, cid, "finished") == "finished"
    count = len(events(client, cid))
    r = client.post(f"/api/conversations/{cid}/ask_agent", json={"question": "what did I say?"})
    assert r.status_code == 200 and r.json() == {"response": "you said hello"}
    asked = llm.requests_for(key)[-1]["messages"]
    assert "what did I say?" in asked[-1]["content"][0]["text"] and asked[-2]["role"] == "assistant"
    assert len(events(client, cid)) == count and info(client, cid)["execution_status"] == "finished"

    analyzer = {"kind": "LLMSecurityAnalyzer"}
    r = client.post(
        f"/api/conversations/{cid}/security_analyzer", json={"security_analyzer": analyzer}
    )
    assert r.status_code == 200 and info(client, cid)["security_analyzer"] == analyzer
    r = client.post(f"/api/conversations/{cid}/security_analyzer", json={"security_analyzer": None})
    assert r.status_code == 200 and info(client, cid)["security_analyzer"] is None
    assert (
        client.post(
            f"/api/conversations/{cid}/security_analyzer",
            json={"security_analyzer": {"no": "kind"}},
        ).status_code
        == 422
    )
    r = client.post(f"/api/conversations/{cid}/load_plugin", json={"plugin_ref": "github:x/y"})
    assert r.status_code == 404 and "no plugins" in r.json()["detail"]
