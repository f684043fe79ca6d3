"""`python -m control_plane` with `CONTROL_PLANE_LOG_FORMAT=json`, as an operator runs it:
every line of its output one JSON object, each request's line carrying the id of the trace it
belongs to (the caller's `traceparent` continued), and no query string, so no key given there,
in any line."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.control_plane.planes import PlaneProcess
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SECRET = "sk-given-in-a-query-0123456789"
CAPABILITY = "9999999999." + "C" * 43


def test_json_lines_share_the_request_trace_and_keep_no_query(tmp_path: Path) -> None:
    plane = PlaneProcess(tmp_path / "cp", log_format="json", log_level="info").start()
    try:
        headers = {"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"}
        r = httpx.get(plane.url + f"/api/v1/llm/v1/models?key={SECRET}", headers=headers)
        assert r.status_code == 401
        httpx.get(plane.url + "/api/v1/users/me", headers={"Authorization": "Bearer nope"})
        # An app link's capability is a credential: its path is logged without it.
        httpx.get(plane.url + f"/sandbox-apps/{'a' * 32}/8011/{CAPABILITY}/index.html")

        def access_lines() -> list[dict[str, object]]:
            lines = [json.loads(line) for line in plane.log_file.read_text().splitlines()]
            return [x for x in lines if x["logger"] == "control_plane.access"]

        def all_three() -> list[dict[str, object]] | None:
            """(Lines of /health, asked while the plane started, may come before them.)"""
            lines = access_lines()
            paths = ("/api/v1/llm/v1/models", "/api/v1/users/me", "/sandbox-apps/")
            logged = all(any(p in str(x["message"]) for x in lines) for p in paths)
            return lines if logged else None

        lines = wait_for(all_three, 30)
    finally:
        plane.stop()
    output = plane.log_file.read_text()
    assert SECRET not in output and CAPABILITY.split(".")[1] not in output
    assert any("/sandbox-apps/" in str(x["message"]) for x in lines)
    for line in output.splitlines():  # the whole output, start and stop included
        record = json.loads(line)
        assert {"time", "level", "logger", "message", "trace_id", "span_id"} <= set(record)
    gateway = next(x for x in lines if "/api/v1/llm/v1/models" in str(x["message"]))
    assert gateway["trace_id"] == TRACE
    assert str(gateway["message"]).startswith("GET /api/v1/llm/v1/models 401")
    other = next(x for x in lines if "/api/v1/users/me" in str(x["message"]))
    # A request without a caller's trace gets one of its own: its id names its lines.
    assert isinstance(other["trace_id"], str) and len(other["trace_id"]) == 32
    assert other["trace_id"] != TRACE
