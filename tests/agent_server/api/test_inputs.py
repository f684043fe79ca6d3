"""Hostile and careless input, in-process: every one a clear 4xx (or an error frame), never
a 500 (issue 16)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient
from websockets.sync.client import connect

from tests.support.inprocess import KEY, app_client, served

DEEP_ARRAY = "[" * 10_000 + "]" * 10_000
# Shallow enough for json.loads, deep enough to break any recursive walk after it.
DEEP_OBJECT = '{"a":' * 900 + "1" + "}" * 900


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with app_client(tmp_path) as c:
        yield c


@pytest.fixture
def cid(client: TestClient) -> str:
    r = client.post("/api/conversations", json={"agent": {"llm": {"model": "m"}}})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def json_routes(cid: str) -> list[tuple[str, str]]:
    c = f"/api/conversations/{cid}"
    return [
        ("POST", "/api/conversations"),
        ("PATCH", "/api/settings"),
        ("PATCH", c),
        ("POST", c + "/events"),
        ("POST", c + "/secrets"),
        ("POST", c + "/commands"),
        ("POST", c + "/confirmation_policy"),
        ("POST", c + "/events/respond_to_confirmation"),
    ]


@pytest.mark.parametrize("body", [DEEP_ARRAY, DEEP_OBJECT], ids=["10000-arrays", "900-objects"])
def test_deeply_nested_json_is_a_422_on_every_json_route(
    client: TestClient, cid: str, body: str
) -> None:
    for method, path in json_routes(cid):
        r = client.request(method, path, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, (method, path, r.status_code, r.text[:200])
        (item,) = r.json()["detail"]
        assert item["type"] == "json_invalid" and "nested" in item["msg"], item


def test_nesting_within_the_limit_is_accepted(client: TestClient) -> None:
    params: dict[str, Any] = {}
    node = params
    for _ in range(30):
        node["x"] = {}
        node = node["x"]
    r = client.post(
        "/api/conversations", json={"agent": {"llm": {"model": "m"}}, "unknown": params}
    )
    assert r.status_code == 201, r.text


def test_a_deeply_nested_websocket_frame_is_answered_with_an_error_frame(tmp_path: Path) -> None:
    with served(tmp_path) as url:
        r = httpx.post(
            url + "/api/conversations",
            json={"agent": {"llm": {"model": "m"}}},
            headers={"X-Session-API-Key": KEY},
        )
        cid = r.json()["id"]
        ws_url = url.replace("http", "ws") + f"/sockets/events/{cid}"
        with connect(ws_url, additional_headers={"X-Session-API-Key": KEY}) as ws:
            state = json.loads(ws.recv(timeout=10))  # the first frame: the full state
            assert state["kind"] == "ConversationStateUpdateEvent" and state["key"] == "full_state"
            for frame in (DEEP_ARRAY, DEEP_OBJECT):
                ws.send(frame)
                answer = json.loads(ws.recv(timeout=10))
                assert answer["kind"] == "ServerErrorEvent" and answer["code"] == "InvalidFrame"
                assert "nested" in answer["detail"]
            ws.send(json.dumps({"role": "user", "content": [{"type": "text", "text": "hi"}]}))
            assert json.loads(ws.recv(timeout=10))["kind"] == "MessageEvent"  # still open


LONG_PATHS = ["a" * 256, "é" * 128, "dir/" + "b" * 300 + "/x", "d/" * 2040 + "x"]


@pytest.mark.parametrize("raw", LONG_PATHS, ids=["256-bytes", "256-utf8-bytes", "inner", "4080"])
def test_a_path_the_system_cannot_hold_is_one_400_on_every_file_route(
    client: TestClient, cid: str, tmp_path: Path, raw: str
) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path / "workspace")], check=True)
    c = f"/api/conversations/{cid}"
    answers = [
        client.get(c + "/file", params={"path": raw}),
        client.post(c + "/file", params={"path": raw}, content=b"x"),
        client.post(c + "/file", params={"path": raw}, files={"file": ("f", b"x")}),
        client.get(c + "/git/diff", params={"path": raw}),
        client.post(c + "/commands", json={"command": "true", "cwd": raw}),
    ]
    for r in answers:
        assert r.status_code == 400, (r.request.method, r.request.url.path, r.text[:300])
        assert "bytes" in r.json()["detail"]


def test_a_lone_surrogate_in_a_path_is_a_4xx(client: TestClient, cid: str) -> None:
    r = client.post(
        f"/api/conversations/{cid}/commands", content=b'{"command": "true", "cwd": "\\ud800"}'
    )
    assert r.status_code == 422, r.text


@pytest.mark.parametrize("raw", ["d/" + "a" * 255, "d/" * 1500 + "x"], ids=["255", "deep"])
def test_long_paths_a_system_can_hold_are_fine(
    client: TestClient, cid: str, raw: str, tmp_path: Path
) -> None:
    try:
        r = client.post(f"/api/conversations/{cid}/file", params={"path": raw}, content=b"x")
        assert r.status_code == 200, r.text
        assert client.get(f"/api/conversations/{cid}/file", params={"path": raw}).content == b"x"
    finally:
        remove_tree(tmp_path / "workspace" / "d")


def remove_tree(top: Path) -> None:
    """rm -r without recursion: shutil.rmtree (pytest's clean-up of tmp_path too) recurses once
    per level, as mkdir -p did, and fails on a tree this deep."""
    found: list[Path] = []
    stack = [top] if top.exists() else []
    while stack:
        directory = stack.pop()
        found.append(directory)
        for entry in directory.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                stack.append(entry)
            else:
                entry.unlink()
    for directory in reversed(found):
        directory.rmdir()


def test_a_command_with_a_nul_byte_is_refused(client: TestClient, cid: str) -> None:
    """A NUL would cut the command bash runs short of the one stored and shown: refused on
    every route that runs one, for the host and a conversation alike, and nothing started."""
    routes = [f"/api/conversations/{cid}/commands"] + [
        f"{prefix}/bash/{name}"
        for prefix in ("/api", f"/api/conversations/{cid}")
        for name in ("start_bash_command", "execute_bash_command")
    ]
    for route in routes:
        for body in ({"command": "echo a\u0000b"}, {"command": "true", "cwd": "a\u0000b"}):
            r = client.post(route, json=body)
            assert r.status_code == 422, (route, r.text)
            (item,) = r.json()["detail"]
            assert item["type"] == "string_pattern_mismatch" and "x00" in item["msg"], item
    for prefix in ("/api", f"/api/conversations/{cid}"):
        r = client.get(f"{prefix}/bash/bash_events/search")
        assert r.status_code == 200 and r.json()["items"] == [], r.text


def test_a_command_printing_a_secret_encoded_shows_it_masked(client: TestClient) -> None:
    secret = "s3cr3t-value-0123456789"
    r = client.post(
        "/api/conversations",
        json={"agent": {"llm": {"model": "m"}}, "secrets": {"API_TOKEN": secret}},
    )
    cid = r.json()["id"]
    command = (
        'echo "$API_TOKEN" | base64; printf %s "$API_TOKEN" | base64 | tr "+/" "-_"; '
        'printf %s "$API_TOKEN" | od -An -tx1 | tr -d " \\n"; echo; '
        'python3 -c "import os, urllib.parse; '
        "print(urllib.parse.quote(os.environ['API_TOKEN']))\""
    )
    r = client.post(f"/api/conversations/{cid}/commands", json={"command": command})
    assert r.status_code == 200, r.text
    lines = r.json()["stdout"].splitlines()
    assert len(lines) == 4 and all("<secret-hidden>" in line for line in lines), lines


def test_a_blank_title_is_refused_as_the_document_says(client: TestClient, cid: str) -> None:
    """Found by bench/fuzz.py: "\\n" met the schema (minLength 1) and was refused."""
    schema = client.get("/openapi.json").json()["components"]["schemas"]["UpdateConversation"]
    title = schema["properties"]["title"]
    pattern = next(p["pattern"] for p in title["anyOf"] if p.get("type") == "string")
    for value, status in (("\n", 422), ("   ", 422), (" x ", 200)):
        assert (re.search(pattern, value) is not None) == (status == 200)
        r = client.patch(f"/api/conversations/{cid}", json={"title": value})
        assert r.status_code == status, r.text
