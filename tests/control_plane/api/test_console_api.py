"""What the web console needs of /api/v1, through httpx against a real control plane: its files
and security headers, the live event relay (SSE) with resume, the conversation controls relayed
to the sandbox, and the sandboxes' counts and deadlines."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.console import STATIC
from tests.control_plane.support import (
    ControlPlane,
    agent_sockets,
    configure_llm,
    conversation,
    start,
    whole_run,
)
from tests.support.llm import Reply, ScriptedLLM, call, text
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e


def frames(
    response: httpx.Response,
) -> Iterator[tuple[str | None, str | None, dict[str, Any] | None]]:
    """(event name, id, data) of each server-sent event."""
    name = event_id = None
    data: list[str] = []
    for line in response.iter_lines():
        if line == "":
            if data or name:
                yield name, event_id, json.loads("\n".join(data)) if data else None
            name = event_id = None
            data = []
        elif line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])


def collect(
    client: httpx.Client, cid: str, until: int, **headers: str
) -> list[tuple[str, dict[str, Any]]]:
    """The first `until` events of the stream (id, event)."""
    out: list[tuple[str, dict[str, Any]]] = []
    with client.stream(
        "GET", f"/api/v1/conversation/{cid}/events/stream", headers=headers, timeout=30
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for _, event_id, data in frames(response):
            if event_id is None or data is None:
                continue
            out.append((event_id, data))
            if len(out) >= until:
                break
    return out


Frame = tuple[str | None, str | None, dict[str, Any] | None]


def read_until(
    stream: Iterator[Frame], seen: list[Frame], done: Callable[[list[Frame]], bool]
) -> None:
    for item in stream:
        seen.append(item)
        if done(seen):
            return
    raise AssertionError("the stream ended")


def deltas(seen: list[Frame]) -> str:
    return "".join((d or {}).get("content") or "" for name, _, d in seen if name == "delta")


def agent_message(seen: list[Frame]) -> dict[str, Any] | None:
    return next(
        (
            d
            for name, _, d in seen
            if name is None and d and d["kind"] == "MessageEvent" and d["source"] == "agent"
        ),
        None,
    )


def test_the_console_is_served_with_a_strict_policy(control_plane: ControlPlane) -> None:
    anonymous = control_plane.client(None)
    page = anonymous.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["x-frame-options"] == "DENY"
    # No inline script or style, nothing from another origin.
    html = page.text
    assert not re.search(r"<script(?![^>]*\bsrc=)", html) and "style=" not in html
    assert "http://" not in html and "https://" not in html
    script = anonymous.get("/js/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    for path in STATIC.rglob("*.js"):
        source = path.read_text()
        assert "innerHTML" not in source and "insertAdjacentHTML" not in source, path
        assert "eval(" not in source and "document.write" not in source, path
    # The API is unchanged: JSON errors, the policy on them too.
    assert anonymous.get("/api/v1/settings").status_code == 401
    missing = anonymous.get("/api/v1/nothing-here")
    assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}
    assert "content-security-policy" in missing.headers
    paths = anonymous.get("/openapi.json").json()["paths"]
    for path in (
        "/api/v1/conversation/{conversation_id}/events/stream",
        "/api/v1/app-conversations/{conversation_id}/pause",
        "/api/v1/app-conversations/{conversation_id}/interrupt",
        "/api/v1/app-conversations/{conversation_id}/confirmation-policy",
        "/api/v1/app-conversations/{conversation_id}/respond-to-confirmation",
    ):
        assert "post" in paths[path] or "get" in paths[path], path


def test_events_are_relayed_live_and_resume_after_an_id(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    client = control_plane.client(control_plane.new_user("alice"))
    configure_llm(client, llm.base_url(key), tools=["terminal"])
    llm.script(key, call("terminal", command="echo one"), call("finish", message="done"))
    task = start(client, "go")
    cid = task["app_conversation_id"]
    wait_for(
        lambda: conversation(client, cid)["execution_status"] == "finished", 60, what="the run"
    )
    ids = wait_for(lambda: whole_run(client, cid), 30, what="the run's events to be stored")
    assert len(ids) >= 6

    # From the start: every stored event, in the stored order, each frame's id its event's id.
    relayed = collect(client, cid, len(ids))
    assert [i for i, _ in relayed] == ids and all(e["id"] == i for i, e in relayed)
    # Resumed after an id (the header, or the query parameter).
    assert [i for i, _ in collect(client, cid, 2, **{"Last-Event-ID": ids[2]})] == ids[3:5]
    with client.stream(
        "GET", f"/api/v1/conversation/{cid}/events/stream", params={"last_event_id": ids[-2]}
    ) as response:
        first = next((i, d) for _, i, d in frames(response) if i is not None)
    assert first[0] == ids[-1]

    # Live: an open stream gets the follow-up's events as the webhook stores them.
    llm.script(key, call("terminal", command="echo two"), call("finish", message="again"))
    seen: list[dict[str, Any]] = []
    with client.stream(
        "GET", f"/api/v1/conversation/{cid}/events/stream", headers={"Last-Event-ID": ids[-1]}
    ) as response:
        r = client.post(
            f"/api/v1/app-conversations/{cid}/send-message",
            json={"content": [{"type": "text", "text": "more"}], "run": True},
        )
        assert r.status_code == 200, r.text
        for _, event_id, data in frames(response):
            if data is not None and event_id is not None:
                seen.append(data)
                if data["kind"] == "ActionEvent" and data["tool_name"] == "finish":
                    break
    kinds = [e["kind"] for e in seen]
    assert kinds[0] == "MessageEvent" and "ObservationEvent" in kinds
    assert [
        e["action"]["command"]
        for e in seen
        if e["kind"] == "ActionEvent" and e["tool_name"] == "terminal"
    ] == ["echo two"]

    # Refusals: an id that is not one of its events, an unknown or another user's conversation.
    r = client.get(f"/api/v1/conversation/{cid}/events/stream", headers={"Last-Event-ID": "nope"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["header", "last-event-id"]
    r = client.get(f"/api/v1/conversation/{cid}/events/stream", headers={"Last-Event-ID": "x" * 65})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["header", "last-event-id"]
    assert r.json()["detail"][0]["type"] == "string_too_long"
    r = client.get(f"/api/v1/conversation/{cid}/events/stream", params={"last_event_id": "nope"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "last_event_id"]
    other = control_plane.client(control_plane.new_user("mallory"))
    assert other.get(f"/api/v1/conversation/{cid}/events/stream").status_code == 404
    assert (
        control_plane.client(None).get(f"/api/v1/conversation/{cid}/events/stream").status_code
        == 401
    )


def test_controls_are_relayed_to_the_sandbox(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    client = control_plane.client(control_plane.new_user("alice"))
    configure_llm(client, llm.base_url(key), tools=["terminal"])
    task = start(client)  # no message: idle
    cid, sid = task["app_conversation_id"], task["sandbox_id"]
    base = f"/api/v1/app-conversations/{cid}"

    # Every action waits: the run stops at the terminal call until it is accepted.
    r = client.post(base + "/confirmation-policy", json={"policy": {"kind": "AlwaysConfirm"}})
    assert r.status_code == 200, r.text
    llm.script(
        key, call("terminal", command="echo accepted > accepted.txt"), call("finish", message="ok")
    )
    client.post(
        base + "/send-message", json={"content": [{"type": "text", "text": "go"}], "run": True}
    )
    wait_for(
        lambda: conversation(client, cid)["execution_status"] == "waiting_for_confirmation",
        30,
        what="the action to wait",
    )
    assert client.get(base + "/file", params={"path": "accepted.txt"}).status_code == 404
    r = client.post(base + "/respond-to-confirmation", json={"accept": True})
    assert r.status_code == 200, r.text
    wait_for(
        lambda: conversation(client, cid)["execution_status"] == "finished", 30, what="the run"
    )
    assert client.get(base + "/file", params={"path": "accepted.txt"}).text == "accepted\n"

    # A browser (every browser sends Sec-Fetch-Mode) is never given a session key or address.
    browser = {"Sec-Fetch-Mode": "cors"}
    assert client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["session_api_key"]
    for path, params in (
        ("/api/v1/sandboxes", {"id": sid}),
        ("/api/v1/sandboxes/search", {}),
        ("/api/v1/app-conversations", {"ids": cid}),
        ("/api/v1/app-conversations/search", {}),
    ):
        found = client.get(path, params=params, headers=browser).json()
        record = found[0] if isinstance(found, list) else found["items"][0]
        assert record["session_api_key"] is None, path
        assert record.get("exposed_urls") is None and record.get("conversation_url") is None, path
        assert record["id"] in (sid, cid)

    # Pause and interrupt reach the agent server (a PauseEvent, an InterruptEvent).
    assert client.post(base + "/pause").status_code == 200
    assert client.post(base + "/interrupt").status_code == 200
    wait_for(
        lambda: (
            {"PauseEvent", "InterruptEvent"}
            <= {
                e["kind"]
                for e in client.get(
                    f"/api/v1/conversation/{cid}/events/search", params={"limit": 1000}
                ).json()["items"]
            }
        ),
        30,
    )

    # The usual rules: bad input 422, another user's 404, a paused sandbox 409, a deleted one 410.
    r = client.post(base + "/confirmation-policy", json={"policy": {"kind": "Sometimes"}})
    assert r.status_code == 422
    assert client.post(base + "/respond-to-confirmation", json={}).status_code == 422
    assert client.post("/api/v1/app-conversations/not-an-id/pause").status_code == 422
    other = control_plane.client(control_plane.new_user("mallory"))
    assert other.post(base + "/pause").status_code == 404
    assert client.post(f"/api/v1/sandboxes/{sid}/pause").status_code == 200
    assert client.post(base + "/interrupt").status_code == 409
    sandbox = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
    assert sandbox["conversation_count"] == 1 and sandbox["pause_at"] is None
    assert sandbox["delete_at"] is not None
    assert client.post(f"/api/v1/sandboxes/{sid}/resume").status_code == 200
    sandbox = client.get("/api/v1/sandboxes/search").json()["items"][0]
    assert sandbox["pause_at"] is not None and sandbox["delete_at"] is None
    assert client.delete(f"/api/v1/sandboxes/{sid}", params={"sandbox_id": sid}).status_code == 200
    assert client.post(base + "/pause").status_code == 410
    assert client.post(base + "/respond-to-confirmation", json={"accept": False}).status_code == 410


def test_streaming_text_is_relayed_while_a_browser_follows(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    client = control_plane.client(control_plane.new_user("alice"))
    configure_llm(client, llm.base_url(key), tools=["terminal"], llm_stream=True)
    llm.script(key, text("first answer"))
    task = start(client, "hello")
    cid, sid = task["app_conversation_id"], task["sandbox_id"]
    wait_for(
        lambda: conversation(client, cid)["execution_status"] == "finished", 60, what="the run"
    )
    assert llm.requests_for(key)[0]["stream"] is True  # the setting reached agent.llm.stream
    # Nobody follows the conversation: the control plane holds no socket to its sandbox.
    assert agent_sockets(client, sid) == 0

    answer = "Streamed piece by piece: the answer is 42, and that is all."
    gate = threading.Event()
    llm.script(key, Reply(text=answer, hold=gate, hold_after=24))
    path = f"/api/v1/conversation/{cid}/events/stream"
    one: list[Frame] = []
    two: list[Frame] = []
    with client.stream("GET", path) as first, client.stream("GET", path) as second:
        a, b = frames(first), frames(second)
        # Both have replayed the stored events, so both follow the deltas; one socket for both.
        for stream, seen in ((a, one), (b, two)):
            read_until(stream, seen, lambda s: agent_message(s) is not None)
        wait_for(lambda: agent_sockets(client, sid) == 1, 30, what="the control plane's socket")
        one.clear()
        two.clear()
        r = client.post(
            f"/api/v1/app-conversations/{cid}/send-message",
            json={"content": [{"type": "text", "text": "more"}], "run": True},
        )
        assert r.status_code == 200, r.text
        # The model is held part-way: the text so far has come, the message has not.
        read_until(a, one, lambda s: len(deltas(s)) >= 24)
        assert answer.startswith(deltas(one)) and agent_message(one) is None
        assert all(event_id is None for name, event_id, _ in one if name == "delta")
        gate.set()
        for stream, seen in ((a, one), (b, two)):
            read_until(stream, seen, lambda s: agent_message(s) is not None)
            assert deltas(seen) == answer
            message = agent_message(seen)
            assert message is not None and message["llm_message"]["content"][0]["text"] == answer
            delta = next(d for name, _, d in seen if name == "delta")
            assert delta is not None and delta["kind"] == "StreamingDeltaEvent"
    # Deltas are never stored; the last stream closed, so did the socket.
    kinds = {
        e["kind"]
        for e in client.get(
            f"/api/v1/conversation/{cid}/events/search", params={"limit": 1000}
        ).json()["items"]
    }
    assert "StreamingDeltaEvent" not in kinds
    wait_for(lambda: agent_sockets(client, sid) == 0, 30, what="the socket to close")


def test_the_consoles_helpers_keep_to_the_users_workspace(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    """The file browser's listing, the model's title, the LLM check and the model names: each
    for its own user only, inside the workspace, bad input a 422."""
    client = control_plane.client(control_plane.new_user("alice"))
    configure_llm(client, llm.base_url(key), tools=["terminal"])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not yours")
    llm.script(
        key,
        call("terminal", command=f"mkdir -p src && echo hi > src/a.txt && ln -s {outside} link"),
        call("finish", message="done"),
    )
    task = start(client, "Make a source folder and a link")
    cid = task["app_conversation_id"]
    base = f"/api/v1/app-conversations/{cid}"
    wait_for(
        lambda: conversation(client, cid)["execution_status"] == "finished", 60, what="the run"
    )

    # The listing: directories first, sizes of files; a link is listed, not followed.
    top = client.get(base + "/files")
    assert top.status_code == 200, top.text
    entries = {e["name"]: e for e in top.json()["entries"]}
    assert entries["src"]["is_dir"] is True and entries["link"]["is_dir"] is False
    assert entries["link"]["size"] is None
    assert client.get(base + "/files", params={"path": "src"}).json()["entries"] == [
        {"name": "a.txt", "path": "src/a.txt", "is_dir": False, "size": 3}
    ]
    # Nothing outside the workspace: not by "..", not through the link, not by an absolute path.
    for path in ("..", "link", str(outside), "src/../../"):
        r = client.get(base + "/files", params={"path": path})
        assert r.status_code == 403, (path, r.status_code, r.text)
        assert "secret.txt" not in r.text
    assert client.get(base + "/files", params={"path": "src/a.txt"}).status_code == 409
    assert client.get(base + "/files", params={"path": "nothing"}).status_code == 404
    assert client.get(base + "/files", params={"path": ""}).status_code == 422

    # The sandbox's whole workspace (`scope=sandbox`, the panel's Files): this conversation's
    # directory is one of its entries, and still nothing outside the workspace is reachable.
    wide = client.get(base + "/files", params={"scope": "sandbox"})
    assert wide.status_code == 200, wide.text
    own = conversation(client, cid)["working_dir"].rstrip("/").rsplit("/", 1)[1]
    assert own in [e["name"] for e in wide.json()["entries"] if e["is_dir"]], wide.text
    inner = client.get(base + "/files", params={"scope": "sandbox", "path": f"{own}/src"})
    assert [e["path"] for e in inner.json()["entries"]] == [f"{own}/src/a.txt"]
    read = client.get(base + "/file", params={"scope": "sandbox", "path": f"{own}/src/a.txt"})
    assert read.status_code == 200 and read.text == "hi\n"
    for path in ("..", f"{own}/link", str(outside), "/etc", f"{own}/../..", f"{own}/src/../../.."):
        r = client.get(base + "/files", params={"path": path, "scope": "sandbox"})
        assert r.status_code == 403, (path, r.status_code, r.text)
        assert "secret.txt" not in r.text
        r = client.get(base + "/file", params={"path": f"{path}/secret.txt", "scope": "sandbox"})
        assert r.status_code == 403 and "not yours" not in r.text, (path, r.status_code, r.text)
    assert client.get(base + "/files", params={"scope": "everything"}).status_code == 422

    # A title from the model (the title prompt is answered; the script is left alone).
    llm.interceptor = lambda _key, body: (
        text("Source folder setup")
        if "for a conversation that starts with" in json.dumps(body["messages"])
        else None
    )
    try:
        titled = client.post(base + "/generate-title")
    finally:
        llm.interceptor = None
    assert titled.status_code == 200, titled.text
    assert titled.json()["title"] == "Source folder setup"
    assert conversation(client, cid)["title"] == "Source folder setup"

    # The check: the stored settings, or the body's; a failure answers 200 with the error,
    # the key masked; bad input 422.
    llm.script(key, text("OK"))
    assert client.post("/api/v1/settings/llm-check", json={}).json()["ok"] is True
    failed = client.post(
        "/api/v1/settings/llm-check",
        json={"llm_base_url": "http://127.0.0.1:9/v1", "llm_api_key": "sk-very-secret-value"},
    ).json()
    assert failed["ok"] is False and "sk-very-secret-value" not in failed["detail"]
    assert (
        client.post("/api/v1/settings/llm-check", json={"llm_base_url": "ftp://x"}).status_code
        == 422
    )
    assert client.post("/api/v1/settings/llm-check", json={"other": 1}).status_code == 422
    assert "gpt-4o" in client.get("/api/v1/settings/llm-models").json()["models"]

    # Another user sees none of it.
    other = control_plane.client(control_plane.new_user("mallory"))
    assert other.get(base + "/files").status_code == 404
    assert other.get(base + "/files", params={"scope": "sandbox"}).status_code == 404
    assert other.post(base + "/generate-title").status_code == 404
    assert conversation(client, cid)["title"] == "Source folder setup"
    assert control_plane.client(None).get("/api/v1/settings/llm-models").status_code == 401
