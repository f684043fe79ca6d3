"""Hostile and careless input, in-process: every one a clear 4xx (or an error frame), never
a 500 (issue 16)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient
from websockets.sync.client import connect

from tests.support.inproc import KEY, app_client, served

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
    return [("POST", "/api/conversations"), ("PATCH", "/api/settings"), ("PATCH", c),
            ("POST", c + "/events"), ("POST", c + "/secrets"), ("POST", c + "/commands"),
            ("POST", c + "/confirmation_policy"), ("POST", c + "/events/respond_to_confirmation")]


@pytest.mark.parametrize("body", [DEEP_ARRAY, DEEP_OBJECT], ids=["10000-arrays", "900-objects"])
def test_deeply_nested_json_is_a_422_on_every_json_route(client: TestClient, cid: str,
                                                         body: str) -> None:
    for method, path in json_routes(cid):
        r = client.request(method, path, content=body,
                           headers={"content-type": "application/json"})
        assert r.status_code == 422, (method, path, r.status_code, r.text[:200])
        (item,) = r.json()["detail"]
        assert item["type"] == "json_invalid" and "nested" in item["msg"], item


def test_nesting_within_the_limit_is_accepted(client: TestClient) -> None:
    params: dict[str, Any] = {}
    node = params
    for _ in range(30):
        node["x"] = {}
        node = node["x"]
    r = client.post("/api/conversations", json={"agent": {"llm": {"model": "m"}},
                                                "unknown": params})
    assert r.status_code == 201, r.text


def test_a_deeply_nested_websocket_frame_is_answered_with_an_error_frame(tmp_path: Path) -> None:
    with served(tmp_path) as url:
        r = httpx.post(url + "/api/conversations", json={"agent": {"llm": {"model": "m"}}},
                       headers={"X-Session-API-Key": KEY})
        cid = r.json()["id"]
        ws_url = url.replace("http", "ws") + f"/sockets/events/{cid}"
        with connect(ws_url, additional_headers={"X-Session-API-Key": KEY}) as ws:
            for frame in (DEEP_ARRAY, DEEP_OBJECT):
                ws.send(frame)
                answer = json.loads(ws.recv(timeout=10))
                assert answer["kind"] == "ServerErrorEvent" and answer["code"] == "InvalidFrame"
                assert "nested" in answer["detail"]
            ws.send(json.dumps({"role": "user", "content": [{"type": "text", "text": "hi"}]}))
            assert json.loads(ws.recv(timeout=10))["kind"] == "MessageEvent"  # still open
