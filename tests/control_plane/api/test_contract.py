"""Findings of schemathesis run with every check against the control plane (issue 41 item 9),
held on the served document."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.routing import BaseRoute
from starlette.testclient import TestClient

from control_plane.api import server
from control_plane.app import ROUTES
from control_plane.openapi import build
from web.errors import HANDLERS


def test_no_request_body_is_required() -> None:
    """Every /api/v1 body is read as `{}` when left out (a start, a sandbox, a settings change
    with none): the document said each was required, and schemathesis' negative case "missing
    request body" (ST201, five operations) was answered 201 and 200."""
    routes: list[BaseRoute] = list(ROUTES)
    document = build(routes)
    bodies = [
        (method, path, operation["requestBody"])
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if "requestBody" in operation
    ]
    assert ("post", "/api/v1/sandboxes") in {(m, p) for m, p, _ in bodies}
    assert [(m, p) for m, p, body in bodies if body.get("required", False)] == []


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PATCH", "/api/v1/app-conversations/count", "GET"),
        ("DELETE", "/api/v1/app-conversations/search", "GET"),
        ("PATCH", "/api/v1/app-conversations/start-tasks", "GET"),
        ("OPTIONS", "/api/v1/sandboxes/search", "GET"),
        ("DELETE", "/api/v1/sandboxes/search", "GET"),
    ],
)
def test_a_literal_path_answers_another_method_with_its_own_405(
    method: str, path: str, allowed: str
) -> None:
    """/app-conversations/count is not the conversation "count": another method there went to
    PATCH /app-conversations/{conversation_id} (a 422 about a bad UUID, schemathesis' ST204)
    and OPTIONS /sandboxes/search listed DELETE and PATCH in `Allow` (ST205). The router alone
    answers (as the app's: its 405 names every method of the path), before any handler: no
    services needed."""
    app = Starlette(routes=[*ROUTES, server.Unserved()], exception_handlers=HANDLERS)
    with TestClient(app) as client:
        r = client.request(method, path)
    assert r.status_code == 405, r.text
    assert {m.strip() for m in r.headers["allow"].split(",")} <= {allowed, "HEAD"}


def test_the_operators_routes_are_documented_only_where_they_exist() -> None:
    """Without CONTROL_PLANE_OPERATOR_KEY the operator's routes answer 404 to anyone, key or
    not: listed in the document, GET /api/v1/admin/audit without Authorization was a 404
    where the document's security said 401 (schemathesis' ST203)."""
    routes: list[BaseRoute] = list(ROUTES)
    assert "/api/v1/admin/audit" in build(routes, operator=True)["paths"]
    paths = build(routes, operator=False)["paths"]
    assert [p for p in paths if p.startswith("/api/v1/admin")] == []
    assert "/api/v1/sandboxes" in paths
