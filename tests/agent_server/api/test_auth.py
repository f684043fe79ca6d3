"""SPEC 5: every /api route wants X-Session-API-Key; Bearer keys and wrong keys get 401.

The route list is walked from agent_server.app.ROUTES, so a route added later is covered
without touching this file.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.routing import Route

from agent_server.app import ROUTES
from tests.conftest import create
from tests.support.llm import ScriptedLLM
from tests.support.server import KEY, ServerProcess

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

HEADER = "X-Session-API-Key"


def _api_calls() -> list[tuple[str, str]]:
    """(method, path template) of every HTTP route under /api."""
    found = []
    for route in ROUTES:
        if not isinstance(route, Route) or not route.path.startswith("/api"):
            continue
        for method in sorted(route.methods or ()):
            if method != "HEAD":
                found.append((method, route.path))
    return found


def _open_calls() -> list[tuple[str, str]]:
    """Routes outside /api answer without a key, but for /metrics (behind the key unless
    --metrics-open: counts by model and tool tell an outsider what runs here)."""
    return [
        (m, r.path)
        for r in ROUTES
        if isinstance(r, Route) and not r.path.startswith("/api") and r.path != "/metrics"
        for m in sorted(r.methods or ())
        if m != "HEAD"
    ]


API_CALLS = _api_calls()
BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/api/conversations"): {"agent": {"llm": {"model": "m"}}},
    ("POST", "/api/conversations/{conversation_id}/events"): {
        "role": "user",
        "content": [{"type": "text", "text": "let me in"}],
        "run": True,
    },
    ("PATCH", "/api/settings"): {"git_user_name": "intruder"},
}


def _fill(template: str, ids: dict[str, str]) -> str:
    return re.sub(r"{(\w+)(?::\w+)?}", lambda m: ids[m.group(1)], template)


@pytest.fixture(scope="module")
def target(
    server: ServerProcess, llm: ScriptedLLM, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """A real conversation and its first event: the refused requests aim at things that exist."""
    with server.client() as c:
        conv = create(c, llm, "auth", tmp_path_factory.mktemp("ws"))
        events = c.get(f"/api/conversations/{conv['id']}/events/search").json()["items"]
    return {
        "conversation_id": conv["id"],
        "event_id": events[0]["id"],
        "command_id": "00000000-0000-4000-8000-000000000001",
    }


def test_the_walk_covers_every_api_route() -> None:
    # Guards the walk itself: if ROUTES changed shape, the parametrized tests would shrink.
    assert len(API_CALLS) >= 15
    assert ("PATCH", "/api/settings") in API_CALLS
    assert ("GET", "/api/conversations/{conversation_id}/events/{event_id}") in API_CALLS


@pytest.mark.parametrize(("method", "template"), API_CALLS, ids=[f"{m} {p}" for m, p in API_CALLS])
def test_api_route_refuses_missing_wrong_and_bearer_keys(
    server: ServerProcess, target: dict[str, str], method: str, template: str
) -> None:
    path = _fill(template, target)
    body = BODIES.get((method, template))
    cases = {
        "missing": {},
        "wrong": {HEADER: "not-" + KEY},
        "empty": {HEADER: ""},
        "bearer": {"Authorization": f"Bearer {KEY}"},
        "wrong key and bearer": {HEADER: KEY + "x", "Authorization": f"Bearer {KEY}"},
    }
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        for case, headers in cases.items():
            r = anonymous.request(method, path, headers=headers, json=body)
            assert r.status_code == 401, (case, r.status_code, r.text)
            assert r.headers["content-type"].startswith("application/json")
            detail = r.json()["detail"]
            assert isinstance(detail, str) and detail, case
            assert KEY not in r.text
            if case == "bearer":
                assert HEADER in detail, detail
    # The route exists behind the check: with the key it answers something other than 401/405.
    with server.client() as c:
        unknown = {**target, "conversation_id": str(uuid.uuid4())}
        r = c.request(method, _fill(template, unknown), json={} if method == "PATCH" else None)
        assert r.status_code not in (401, 405, 500), r.text
        if r.status_code == 404:
            assert "not found" in r.json()["detail"].lower() and r.json()["detail"] != "Not Found"


def test_refused_requests_change_nothing(server: ServerProcess, target: dict[str, str]) -> None:
    conv_path = f"/api/conversations/{target['conversation_id']}"
    with server.client() as c:
        before_conv = c.get(conv_path).json()
        before_events = c.get(conv_path + "/events/count").json()
        before_settings = c.get("/api/settings").json()
        before_count = c.get("/api/conversations/count").json()
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        for method, template in API_CALLS:
            anonymous.request(
                method,
                _fill(template, target),
                json=BODIES.get((method, template)),
                headers={"Authorization": f"Bearer {KEY}"},
            )
    with server.client() as c:
        assert c.get(conv_path).json() == before_conv
        assert c.get(conv_path + "/events/count").json() == before_events
        assert c.get("/api/settings").json() == before_settings
        assert c.get("/api/conversations/count").json() == before_count


def test_query_string_key_is_not_a_credential(server: ServerProcess) -> None:
    r = httpx.get(server.url + "/api/settings", params={"session_api_key": KEY})
    assert r.status_code == 401


def test_the_right_key_is_accepted(client: httpx.Client) -> None:
    assert client.get("/api/settings").status_code == 200
    assert client.get("/api/conversations/count").status_code == 200


@pytest.mark.parametrize(
    ("method", "path"), _open_calls(), ids=[f"{m} {p}" for m, p in _open_calls()]
)
def test_routes_outside_api_need_no_key(server: ServerProcess, method: str, path: str) -> None:
    r = httpx.request(method, server.url + path, timeout=30)
    assert r.status_code == 200, r.text  # each of them answers, not only "not 401"


def test_metrics_need_the_key(server: ServerProcess) -> None:
    assert httpx.get(server.url + "/metrics", timeout=30).status_code == 401
    r = httpx.get(server.url + "/metrics", headers={"X-Session-API-Key": KEY}, timeout=30)
    assert r.status_code == 200 and "# TYPE" in r.text


def test_server_info_tells_activity_only_with_the_key(server: ServerProcess) -> None:
    """A neighbour that reaches the port learns what the server is, not how it is used."""
    bare = httpx.get(server.url + "/server_info", timeout=30).json()
    assert bare["version"] and bare["usable_tools"]
    for field in ("uptime", "idle_time", "conversations", "running", "websockets", "webhook"):
        assert bare[field] is None, (field, bare)
    wrong = httpx.get(
        server.url + "/server_info", headers={"X-Session-API-Key": "nope"}, timeout=30
    ).json()
    assert wrong == bare
    keyed = httpx.get(
        server.url + "/server_info", headers={"X-Session-API-Key": KEY}, timeout=30
    ).json()
    assert keyed["uptime"] > 0 and keyed["conversations"] >= 0 and keyed["websockets"] >= 0


def test_health_and_ready_answer_without_a_key(server: ServerProcess) -> None:
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    r = httpx.get(server.url + "/ready")
    assert r.status_code == 200 and r.json() == {"status": "ready"}


@pytest.fixture(scope="module")
def rotating(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("rotating") / "state", env={"SESSION_API_KEY": "k1-old, k2-new"}
    ).start()
    yield proc
    proc.stop()


def test_rotation_accepts_every_configured_key(rotating: ServerProcess) -> None:
    for key in ("k1-old", "k2-new"):
        r = httpx.get(rotating.url + "/api/conversations/count", headers={HEADER: key})
        assert r.status_code == 200, (key, r.text)
    for key in ("k3", "k1-old,k2-new", KEY, "k1"):
        r = httpx.get(rotating.url + "/api/conversations/count", headers={HEADER: key})
        assert r.status_code == 401, key
