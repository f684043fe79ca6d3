"""Auth on every /api/v1 route, one user never sees another's things, SPEC 7 error bodies,
sandbox routes (SPEC 4.3) and the OpenAPI document."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

from control_plane.app import ROUTES
from core import processes
from tests.control_plane.support import (
    ControlPlane,
    configure_llm,
    conversation,
    make_config,
    sandbox_pid,
    start,
)
from tests.support.llm import ScriptedLLM, call
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

#: The account-key routes: not the webhook, nor the LLM gateway (a sandbox's token, errors in
#: the provider's shape: test_gateway).
V1_ROUTES = [
    (m, r.path)
    for r in ROUTES
    for m in sorted(r.methods or ())
    if m != "HEAD"
    and r.path.startswith("/api/v1")
    and not r.path.startswith("/api/v1/webhooks")
    and not r.path.startswith("/api/v1/llm/")
    and not r.path.startswith("/api/v1/admin/")  # the operator's key (test_audit)
]
SOME_UUID = "00000000-0000-4000-8000-000000000000"


def fill(path: str, conversation_id: str = SOME_UUID, sandbox_id: str = "abc") -> str:
    return (
        path.replace("{conversation_id}", conversation_id)
        .replace("{sandbox_id}", sandbox_id)
        .replace("{secret_name}", "GITHUB_TOKEN")
    )


def assert_validation_body(body: Any) -> None:
    """SPEC 7: HTTPValidationError."""
    assert isinstance(body["detail"], list) and body["detail"]
    for item in body["detail"]:
        assert isinstance(item["loc"], list) and isinstance(item["msg"], str)
        assert isinstance(item["type"], str)


def wait_running(client: httpx.Client, sandbox_id: str) -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        record: dict[str, Any] = client.get("/api/v1/sandboxes", params={"id": sandbox_id}).json()[
            0
        ]
        assert record["status"] in ("STARTING", "RUNNING"), record
        return record if record["status"] == "RUNNING" else None

    found: dict[str, Any] = wait_for(running, 30, what="RUNNING")
    return found


@pytest.mark.parametrize("method,path", V1_ROUTES)
def test_every_route_refuses_a_missing_or_wrong_key(
    control_plane: ControlPlane, method: str, path: str
) -> None:
    for headers in (
        {},
        {"Authorization": "Bearer cp_wrong"},
        {"Authorization": "Basic eDp5"},
        {"X-Session-API-Key": "anything"},
    ):
        r = httpx.request(method, control_plane.url + fill(path), headers=headers, json={})
        assert r.status_code == 401, (method, path, headers, r.text)
        assert isinstance(r.json()["detail"], str)


def test_users_see_only_their_own(control_plane: ControlPlane, llm: ScriptedLLM, key: str) -> None:
    alice = control_plane.client(control_plane.new_user("alice"))
    bob = control_plane.client(control_plane.new_user("bob"))
    configure_llm(alice, llm.base_url(key))
    llm.script(key, call("finish", message="done"))
    task = start(alice, "hi")
    assert task["status"] == "READY", task
    cid, sid = task["app_conversation_id"], task["sandbox_id"]

    for method, path in V1_ROUTES:
        if "{" not in path or "/settings/secrets" in path:  # a sandbox's own key only (below)
            continue
        r = bob.request(
            method,
            fill(path, cid, sid),
            params={"sandbox_id": sid, "path": "x", "port": 8011},
            json={"role": "user", "content": [{"type": "text", "text": "x"}]},
        )
        assert r.status_code == 404, (method, path, r.text)
        assert isinstance(r.json()["detail"], str)
    assert bob.get("/api/v1/app-conversations", params={"ids": cid}).json() == [None]
    assert bob.get("/api/v1/sandboxes", params={"id": sid}).json() == [None]
    assert bob.get("/api/v1/sandboxes/search").json()["items"] == []
    assert bob.get("/api/v1/app-conversations/search").json()["items"] == []
    assert bob.get("/api/v1/app-conversations/start-tasks", params={"ids": task["id"]}).json() == [
        None
    ]
    r = bob.post("/api/v1/app-conversations", json={"sandbox_id": sid})
    assert r.status_code == 404
    # ... and alice still has all of it.
    assert alice.get("/api/v1/app-conversations", params={"ids": cid}).json()[0]["id"] == cid


def test_bad_input_is_422_with_validation_errors(control_plane: ControlPlane) -> None:
    client = control_plane.client(control_plane.new_user("carol"))
    cases = [
        ("POST", "/api/v1/app-conversations", {"content": b"{not json"}),
        ("POST", "/api/v1/app-conversations", {"json": {"initial_message": {"content": []}}}),
        ("POST", "/api/v1/app-conversations", {"json": {"selected_repository": "no-slash"}}),
        (
            "POST",
            "/api/v1/app-conversations",
            {"json": {"observability_metadata": {"a": [1, "x"]}}},
        ),
        (
            "POST",
            "/api/v1/app-conversations",
            {"json": {"observability_metadata": {"a": {"b": 1}}}},
        ),
        ("POST", "/api/v1/app-conversations", {"json": {"secrets": {"bad name": "v"}}}),
        ("POST", "/api/v1/app-conversations", {"json": {"plugins": [{"name": "x"}]}}),
        ("GET", "/api/v1/app-conversations", {}),
        ("GET", "/api/v1/app-conversations/search", {"params": {"limit": 1000}}),
        (
            "GET",
            "/api/v1/app-conversations/search",
            {"params": {"created_at__gte": "2026-01-01T00:00:00"}},
        ),
        ("GET", "/api/v1/app-conversations/start-tasks", {}),
        ("GET", "/api/v1/sandboxes", {}),
        ("GET", "/api/v1/sandboxes/search", {"params": {"status": "SLEEPING"}}),
        ("POST", "/api/v1/sandboxes", {"json": {"sandbox_spec_id": "docker-xl"}}),
        ("PATCH", "/api/v1/settings", {"json": {"grouping_strategy": "RANDOM"}}),
        ("PATCH", "/api/v1/settings", {"json": {"default_tools": ["rm_rf"]}}),
        ("PATCH", "/api/v1/settings", {"json": {"surprise": 1}}),
        ("GET", "/api/v1/conversation/not-a-uuid/events/search", {}),
        (
            "GET",
            f"/api/v1/conversation/{SOME_UUID}/events/search",
            {"params": {"kind__eq": "Nope"}},
        ),
        ("PATCH", "/api/v1/app-conversations/not-a-uuid", {"json": {}}),
    ]
    for method, path, kw in cases:
        r = client.request(method, path, **kw)
        assert r.status_code == 422, (method, path, kw, r.text)
        assert_validation_body(r.json())
    r = client.patch("/api/v1/settings", json={"llm_api_key": 5})
    assert r.status_code == 422 and "**********" in r.text
    r = client.post("/api/v1/app-conversations", content=b"x" * (2 * 1024 * 1024))
    assert r.status_code == 413 and isinstance(r.json()["detail"], str)
    r = client.get(f"/api/v1/app-conversations/{SOME_UUID}/file", params={"path": "a"})
    assert r.status_code == 404 and isinstance(r.json()["detail"], str)
    assert client.get("/api/v1/nothing-here").status_code == 404


def test_settings_round_trip(control_plane: ControlPlane) -> None:
    client = control_plane.client(control_plane.new_user("dana"))
    initial = client.get("/api/v1/settings").json()
    assert initial["grouping_strategy"] == "NO_GROUPING" and initial["llm_api_key"] is None
    assert initial["llm_stream"] is False
    r = client.patch(
        "/api/v1/settings",
        json={
            "grouping_strategy": "LEAST_RECENTLY_USED",
            "llm_model": "openai/x",
            "llm_api_key": "sk-1",
            "default_tools": ["terminal"],
            "git_user_name": "D",
            "secrets": {"GH": "ghp_x"},
            "llm_stream": True,
        },
    )
    assert r.status_code == 200, r.text
    view = client.get("/api/v1/settings").json()
    assert view == {**r.json()}
    assert (
        view["grouping_strategy"] == "LEAST_RECENTLY_USED" and view["llm_api_key"] == "**********"
    )
    assert view["default_tools"] == ["terminal"] and view["secret_names"] == ["GH"]
    assert view["llm_stream"] is True
    assert "sk-1" not in r.text and "ghp_x" not in r.text
    r = client.patch("/api/v1/settings", json={"llm_api_key": None})
    assert r.json()["llm_api_key"] is None and r.json()["llm_model"] == "openai/x"
    assert r.json()["llm_stream"] is True
    assert client.patch("/api/v1/settings", json={"llm_stream": None}).json()["llm_stream"] is False
    assert client.patch("/api/v1/settings", json={"llm_stream": "sometimes"}).status_code == 422


def test_sandbox_routes(control_plane: ControlPlane) -> None:
    client = control_plane.client(control_plane.new_user("erin"))
    specs = client.get("/api/v1/sandbox-specs/search").json()["items"]
    assert [s["id"] for s in specs] == ["process"]
    r = client.post("/api/v1/sandboxes", json={})
    assert r.status_code == 201 and r.json()["status"] == "STARTING"
    assert r.json()["session_api_key"] is None and r.json()["exposed_urls"] is None
    sid = r.json()["id"]
    record = wait_running(client, sid)
    url = record["exposed_urls"][0]["url"]
    session = {"X-Session-API-Key": record["session_api_key"]}
    assert httpx.get(url + "/api/conversations/search", headers=session).status_code == 200

    # DELETE without, or with a different, sandbox_id: 422, and the sandbox stays.
    for params in ({}, {"sandbox_id": "other"}):
        r = client.delete(f"/api/v1/sandboxes/{sid}", params=params)
        assert r.status_code == 422, r.text
        assert_validation_body(r.json())
    assert httpx.get(url + "/alive").status_code == 200

    r = client.post(f"/api/v1/sandboxes/{sid}/pause")
    assert r.status_code == 200 and r.json()["status"] == "PAUSED"
    assert r.json()["session_api_key"] is None
    pid = sandbox_pid(control_plane, sid)
    assert processes.state(pid) == "T"
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/alive", timeout=0.5)
    r = client.post(f"/api/v1/sandboxes/{sid}/resume")
    assert r.status_code == 200 and r.json()["status"] == "RUNNING"
    assert httpx.get(url + "/alive").status_code == 200

    page = client.get("/api/v1/sandboxes/search", params={"status": "RUNNING"}).json()
    assert [s["id"] for s in page["items"]] == [sid]
    r = client.delete(f"/api/v1/sandboxes/{sid}", params={"sandbox_id": sid})
    assert r.status_code == 200
    assert client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["status"] == "MISSING"
    assert processes.state(pid) in (None, "Z")
    r = client.post(f"/api/v1/sandboxes/{sid}/resume")
    assert r.status_code == 410 and "MISSING" in r.json()["detail"]


def test_a_vanished_sandbox_is_missing_and_its_conversations_read_only(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    client = control_plane.client(control_plane.new_user("fred"))
    configure_llm(client, llm.base_url(key))
    llm.script(key, call("finish", message="done"))
    task = start(client, "hi")
    cid, sid = task["app_conversation_id"], task["sandbox_id"]
    wait_for(
        lambda: (
            client.get(
                f"/api/v1/conversation/{cid}/events/count", params={"kind__eq": "ActionEvent"}
            ).json()
            == 1
        ),
        30,
    )
    pid = sandbox_pid(control_plane, sid)
    processes.signal_group(pid, signal.SIGKILL)
    sandbox = wait_for(
        lambda: (
            (s := client.get("/api/v1/sandboxes", params={"id": sid}).json()[0])["status"]
            == "MISSING"
            and s
        ),
        10,
        what="MISSING",
    )
    assert sandbox["status_reason"] == "VANISHED" and "read-only" in sandbox["status_detail"]
    record = client.get("/api/v1/app-conversations", params={"ids": cid}).json()[0]
    assert record["sandbox_status"] == "MISSING"
    # SPEC 3.1: no messages, no resume, no workspace reads; the transcript stays readable.
    r = client.post(
        f"/api/v1/app-conversations/{cid}/send-message",
        json={"content": [{"type": "text", "text": "x"}]},
    )
    assert r.status_code == 410 and "read-only" in r.json()["detail"]
    assert (
        client.get(f"/api/v1/app-conversations/{cid}/file", params={"path": "a"}).status_code == 410
    )
    assert client.get(f"/api/v1/app-conversations/{cid}/git/changes").status_code == 410
    assert client.post(f"/api/v1/sandboxes/{sid}/resume").status_code == 410
    assert client.post(f"/api/v1/sandboxes/{sid}/pause").status_code == 410
    assert client.post(f"/api/v1/app-conversations/{cid}/pause").status_code == 410
    assert client.post("/api/v1/app-conversations", json={"sandbox_id": sid}).status_code == 410
    assert client.get(f"/api/v1/app-conversations/{cid}/download").status_code == 200
    events = client.get(f"/api/v1/conversation/{cid}/events/search").json()["items"]
    assert any(e["kind"] == "ActionEvent" for e in events)
    # Why, in the conversation's own events.
    notices = [
        e["value"]
        for e in events
        if e["kind"] == "ConversationStateUpdateEvent" and e["key"] == "sandbox_status"
    ]
    assert [(n["status"], n["reason"]) for n in notices] == [("MISSING", "VANISHED")]
    # Deleting it afterwards changes nothing of that.
    assert client.delete(f"/api/v1/sandboxes/{sid}", params={"sandbox_id": sid}).status_code == 200
    assert (
        client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["status_reason"] == "VANISHED"
    )


def test_a_run_whose_sandbox_died_ends_in_error(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    """Killed mid-run, the sandbox says nothing any more: the run is recorded as ended (ERROR),
    with the execution status in the conversation's events beside the notice that says why."""
    client = control_plane.client(control_plane.new_user("gina"))
    configure_llm(client, llm.base_url(key))
    llm.script(key, call("terminal", command="sleep 600"))
    task = start(client, "wait")
    cid, sid = task["app_conversation_id"], task["sandbox_id"]
    wait_for(
        lambda: (
            conversation(client, cid)["execution_status"] == "running"
            and client.get(
                f"/api/v1/conversation/{cid}/events/count", params={"kind__eq": "ActionEvent"}
            ).json()
            == 1
        ),
        30,
        what="the run under way",
    )
    processes.signal_group(sandbox_pid(control_plane, sid), signal.SIGKILL)
    wait_for(lambda: conversation(client, cid)["sandbox_status"] == "MISSING", 30, what="MISSING")
    # Told right after the status is stored (the record read in between still says RUNNING).
    wait_for(lambda: conversation(client, cid)["execution_status"] == "error", 10, what="ERROR")
    events = client.get(
        f"/api/v1/conversation/{cid}/events/search",
        params={"kind__eq": "ConversationStateUpdateEvent"},
    ).json()["items"]
    told = [
        (e["key"], e["value"]) for e in events if e["key"] in ("sandbox_status", "execution_status")
    ]
    assert told[-1] == ("execution_status", "error")
    assert told[-2][0] == "sandbox_status" and told[-2][1]["reason"] == "VANISHED"
    assert (
        client.get("/api/v1/app-conversations/search", params={"sandbox_id": sid}).json()["items"][
            0
        ]["execution_status"]
        == "error"
    )


def test_workspace_files_never_render_on_the_consoles_origin(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    """Files the agent wrote come as attachments, text as text/plain: an HTML page or an SVG
    does not run as a page of the console. A path outside the workspace is refused without
    naming where the workspace lies on the host."""
    client = control_plane.client(control_plane.new_user("hank"))
    configure_llm(client, llm.base_url(key))
    page = "<script>document.title='owned'</script>"
    llm.script(
        key,
        call(
            "terminal",
            command=f'echo "{page}" > evil.html && '
            "echo '<svg xmlns=\"http://www.w3.org/2000/svg\"/>' > evil.svg && "
            "printf '\\377\\376' > blob.bin",
        ),
        call("finish", message="done"),
    )
    task = start(client, "write")
    cid = task["app_conversation_id"]
    wait_for(
        lambda: conversation(client, cid)["execution_status"] == "finished", 60, what="the run"
    )
    base = f"/api/v1/app-conversations/{cid}/file"
    for name, media_type in (
        ("evil.html", "text/plain; charset=utf-8"),
        ("evil.svg", "text/plain; charset=utf-8"),
        ("blob.bin", "application/octet-stream"),
    ):
        r = client.get(base, params={"path": name})
        assert r.status_code == 200 and r.headers["content-type"] == media_type, r.headers
        assert r.headers["content-disposition"] == f"attachment; filename*=UTF-8''{name}"
        assert r.headers["x-content-type-options"] == "nosniff"
    assert page in client.get(base, params={"path": "evil.html"}).text
    r = client.get(base, params={"path": "/etc/passwd"})
    assert r.status_code == 403 and r.json() == {
        "detail": "the path is outside the conversation's working directory"
    }
    assert str(control_plane.config.state_dir) not in r.text


def test_the_document_and_the_server_agree(control_plane: ControlPlane) -> None:
    """A method a path does not serve is a 405 naming those it does (not the console's
    'GET, HEAD'); an unknown /api path a JSON 404; a sandbox id is declared with the pattern the
    server checks; a moment in a query is ISO 8601, never a number taken as an epoch."""
    client = control_plane.client(control_plane.new_user("ivy"))
    r = client.put("/api/v1/settings", json={})
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD, PATCH", r.headers
    r = client.post("/api/v1/sandbox-specs/search")
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
    r = client.put("/api/v1/sandboxes/ab/pause")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    r = client.delete("/api/v1/nothing-here")
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    assert client.get("/").status_code == 200  # the console still serves its page

    doc = httpx.get(control_plane.url + "/openapi.json").json()
    pause = doc["paths"]["/api/v1/sandboxes/{sandbox_id}/pause"].values()
    declared = {
        p["name"]: p["schema"] for op in pause for p in op["parameters"] if p["in"] == "path"
    }
    assert declared == {"sandbox_id": {"type": "string", "pattern": "^[A-Za-z0-9-]{1,64}$"}}
    assert client.post("/api/v1/sandboxes/a_b/pause").status_code == 422  # outside the pattern
    assert client.post("/api/v1/sandboxes/ab/pause").status_code == 404  # inside it

    for value in ("0.5", "1700000000", "-1"):
        r = client.get("/api/v1/app-conversations/search", params={"updated_at__lt": value})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "updated_at__lt"]
    r = client.get(
        "/api/v1/app-conversations/search", params={"updated_at__lt": "2030-01-01T00:00:00Z"}
    )
    assert r.status_code == 200


def test_openapi_document(control_plane: ControlPlane) -> None:
    doc = httpx.get(control_plane.url + "/openapi.json").json()
    validate(doc)
    assert doc["openapi"] == "3.1.0" and doc["info"]["version"] == "0.0.1"
    hook = doc["webhooks"]["events"]["post"]
    assert hook["parameters"][0]["schema"]["format"] == "uuid"
    assert "422" in hook["responses"] and hook["security"] == [{"APIKeyHeader": []}]
    assert "/api/v1/sandboxes/{sandbox_id}" in doc["paths"]
    assert "/api/v1/conversation/{conversation_id}/events/search" in doc["paths"]


def test_live_sandboxes_per_user_are_bounded(tmp_path: Path, llm: ScriptedLLM, key: str) -> None:
    plane = ControlPlane(make_config(tmp_path / "cp", max_sandboxes_per_user=2)).start()
    try:
        client = plane.client(plane.new_user("gina"))
        configure_llm(client, llm.base_url(key))
        first = client.post("/api/v1/sandboxes")  # no body at all: every field left out
        assert first.status_code == 201, first.text
        assert start(client)["status"] == "READY"
        r = client.post("/api/v1/sandboxes", json={})
        assert r.status_code == 429 and "at most 2" in r.json()["detail"]
        task = start(client)
        assert task["status"] == "ERROR" and "at most 2" in task["detail"]
        sid = first.json()["id"]
        wait_running(client, sid)
        assert (
            client.delete(f"/api/v1/sandboxes/{sid}", params={"sandbox_id": sid}).status_code == 200
        )
        assert start(client)["status"] == "READY"  # a MISSING sandbox no longer counts
    finally:
        plane.stop()
