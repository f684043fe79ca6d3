"""Findings of schemathesis run with every check (issue 41 item 9), each held here as the
request it sent: the server answers as the served /openapi.json says."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from starlette.routing import BaseRoute
from starlette.testclient import TestClient

from agent_server.app import ROUTES
from agent_server.openapi import build
from tests.support.inprocess import app_client


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with app_client(tmp_path) as c:
        yield c


@pytest.fixture
def cid(client: TestClient) -> str:
    r = client.post("/api/conversations", json={"agent": {"llm": {"model": "m"}}})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


@pytest.mark.parametrize("kind", [None, 5, "ours"], ids=["null", "number", "ours"])
def test_a_condenser_whose_kind_names_no_form_is_refused(client: TestClient, kind: object) -> None:
    """The document's condensers are a `oneOf` picked by `kind`; our own form is the one with
    no `kind` at all. `"kind": null` (inside a pipeline, schemathesis' ST201) was read as our
    form with its other fields ignored: a 201 for a body the document refuses."""
    summarizing = {"kind": kind, "llm": {"model": "m"}, "max_size": 240}
    pipeline = {"kind": "PipelineCondenser", "condensers": [summarizing]}
    for condenser in (summarizing, pipeline):
        r = client.post(
            "/api/conversations", json={"agent": {"llm": {"model": "m"}, "condenser": condenser}}
        )
        assert r.status_code == 422, r.text
        assert any(e["type"] == "condenser_kind" for e in r.json()["detail"]), r.text
    r = client.post(
        "/api/conversations",
        json={"agent": {"llm": {"model": "m"}, "condenser": {"enabled": False}}},
    )
    assert r.status_code == 201, r.text  # our own form: no kind


@pytest.mark.parametrize("route", ["search", "count"])
def test_an_event_search_refuses_a_bad_value_of_a_parameter_it_declares(
    client: TestClient, cid: str, route: str
) -> None:
    """Every declared filter is checked (422 at query.<name>); a parameter it does not declare
    (`status`, which neither events search has) is ignored, as OpenHands' server ignores it:
    the SDK and the app server's clients send what their version knows."""
    url = f"/api/conversations/{cid}/events/{route}"
    for name in ("kind", "kind__eq", "source", "source__eq", "timestamp__gte"):
        r = client.get(url, params={name: "nope"})
        assert r.status_code == 422, (name, r.text)
        assert r.json()["detail"][0]["loc"] == ["query", name], r.text
    assert client.get(url, params={"status": "nope"}).status_code == 200


def _path_schemas(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Where the document takes a path: each operation's `path` query, the `cwd` of a command,
    a skills request's `project_dir`."""
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                if parameter["name"] == "path" and parameter["in"] == "query":
                    yield f"{method} {path}", parameter["schema"]
    schemas = document["components"]["schemas"]
    for component, field in (
        ("RunCommand", "cwd"),
        ("StartCommand", "cwd"),
        ("SkillsRequest", "project_dir"),
    ):
        yield component, schemas[component]["properties"][field]


def test_the_document_says_a_path_component_is_at_most_255_long() -> None:
    """A `path` of 4096 zeros fitted the document (schemathesis' coverage phase: ST202 on
    every file route) while the server refuses a component past 255 bytes (a 400: no file
    system here holds it). The document now says so in characters, all JSON Schema can count;
    and every route taking a path documents the 400 (POST /api/skills did not: ST103)."""
    routes: list[BaseRoute] = list(ROUTES)
    document = build(routes)
    found = dict(_path_schemas(document))
    assert len(found) >= 14, sorted(found)
    for where, schema in found.items():
        strings = [s for s in schema.get("anyOf", [schema]) if s.get("type") == "string"]
        (pattern,) = {re.compile(s["pattern"]) for s in strings}
        assert not pattern.search("0" * 256), where
        assert not pattern.search("a/" + "0" * 256 + "/b"), where
        assert not pattern.search("a\x00b"), where
        assert pattern.search("d/" + "a" * 255), where
        assert pattern.search("/abs/d/" + "é" * 255 + "/x.txt"), where
    for operations in document["paths"].values():
        for method, operation in operations.items():
            body = json.dumps(operation.get("requestBody", {}))
            takes = any(p["name"] == "path" for p in operation.get("parameters", []))
            if takes or any(c in body for c in ("RunCommand", "StartCommand", "SkillsRequest")):
                assert "400" in operation["responses"], (method, operation["operationId"])


def test_the_server_refuses_what_the_document_refuses(
    client: TestClient, cid: str, tmp_path: Path
) -> None:
    """A component past 255 is still the server's own 400 (what it checks is bytes), on the
    routes the document now says it for."""
    (tmp_path / "workspace").mkdir(exist_ok=True)
    r = client.post("/api/skills", json={"project_dir": str(tmp_path / "workspace" / ("a" * 256))})
    assert r.status_code == 400, r.text
    r = client.get(f"/api/conversations/{cid}/file", params={"path": "0" * 256})
    assert r.status_code == 400, r.text


@pytest.mark.parametrize(
    ("patch", "valid"),
    [
        ({"acp_agents": None}, True),  # schemathesis' ST201: refused by the document
        ({"agent": {"llm": {"temperature": 1}}}, True),  # merged into the stored LLM
        ({"agent": {"llm": None, "condenser": None}, "secrets": {"GONE": None}}, True),
        ({"agent": {"llm": {"model": None}}}, False),  # what has no default cannot go
        ({"agent": {"tools": [{"name": "nope"}]}}, False),
        ({"acp_agents": {"mine": {}}}, False),  # a new entry comes whole
    ],
)
def test_a_settings_patch_is_documented_as_the_server_merges_it(
    client: TestClient, patch: dict[str, Any], valid: bool
) -> None:
    """PATCH /api/settings deep-merges its body (null removes a field back to its default):
    its document is the merge's, not the stored settings' own."""
    routes: list[BaseRoute] = list(ROUTES)
    document = build(routes)
    schema = document["paths"]["/api/settings"]["patch"]["requestBody"]["content"][
        "application/json"
    ]["schema"]
    validator = Draft202012Validator({**schema, "components": document["components"]})
    assert validator.is_valid(patch) is valid
    stored = client.patch("/api/settings", json={"agent": {"llm": {"model": "m"}}})
    assert stored.status_code == 200, stored.text
    r = client.patch("/api/settings", json=patch)
    assert r.status_code == (200 if valid else 422), r.text


def test_a_path_the_workspace_holds_otherwise_is_a_conflict(
    client: TestClient, cid: str, tmp_path: Path
) -> None:
    """A write under a file an earlier write made, or onto a directory, is valid as written
    and refused for what the workspace holds: 409, documented on each route that can say it
    (it was a 400: schemathesis' ST202, POST .../file with path `0//0` after `0`)."""
    url = f"/api/conversations/{cid}/file"
    assert client.post(url, params={"path": "0"}, content=b"x").status_code == 200
    for path in ("0//0", "0/deeper/x"):
        r = client.post(url, params={"path": path}, content=b"x")
        assert r.status_code == 409, r.text
    (tmp_path / "workspace" / "d").mkdir()
    for r in (
        client.post(url, params={"path": "d"}, content=b"x"),
        client.get(url, params={"path": "d"}),
        client.get(f"/api/conversations/{cid}/files", params={"path": "0"}),
        client.post(f"/api/conversations/{cid}/commands", json={"command": "true", "cwd": "0"}),
    ):
        assert r.status_code == 409, (r.request.url, r.text)
    routes: list[BaseRoute] = list(ROUTES)
    document = build(routes)
    for operations in document["paths"].values():
        for method, operation in operations.items():
            body = json.dumps(operation.get("requestBody", {}))
            takes = any(p["name"] == "path" for p in operation.get("parameters", []))
            if takes or any(c in body for c in ("RunCommand", "StartCommand")):
                assert "409" in operation["responses"], (method, operation["operationId"])
