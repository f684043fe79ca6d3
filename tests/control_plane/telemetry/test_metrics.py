"""The control plane's /metrics as an operator's Prometheus reads it: behind the operator key,
parsed with prometheus-client's own parser, and moving with what happened (a start, a pause,
a webhook batch, a failed start), with no id of a user, sandbox, conversation or task in any
label."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.control_plane.support import (
    ControlPlane,
    configure_llm,
    make_config,
    start,
    wait_for,
    whole_run,
)
from tests.support.llm import ScriptedLLM, call

pytestmark = pytest.mark.e2e

OPERATOR = "operator-key-for-tests-" + "0" * 16


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    server = ControlPlane(make_config(tmp_path / "cp", operator_key=OPERATOR)).start()
    yield server
    server.stop()


def scrape(plane: ControlPlane) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample: (name, sorted labels) -> value."""
    r = httpx.get(plane.url + "/metrics", headers={"Authorization": f"Bearer {OPERATOR}"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    """The sum of `name`'s samples whose labels include `labels` (0 when none)."""
    return sum(
        v for (n, have), v in samples.items() if n == name and set(labels.items()) <= set(have)
    )


def test_the_metrics_move_with_starts_pauses_batches_and_failures(
    plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    user_key = plane.new_user("alice")
    client = plane.client(user_key)
    configure_llm(client, llm.base_url(key))
    llm.script(key, call("finish", message="done"))
    before = scrape(plane)

    task = start(client, "hello")
    assert task["status"] == "READY", task
    sid, cid = task["sandbox_id"], task["app_conversation_id"]
    wait_for(lambda: whole_run(client, cid), 60, what="the run's events stored")
    assert client.post(f"/api/v1/sandboxes/{sid}/pause").status_code == 200
    # A start that fails: a user with no model configured.
    failing = plane.client(plane.new_user("bob"))
    failed = start(failing, "hello")
    assert failed["status"] == "ERROR", failed

    after = scrape(plane)
    moved = {
        name: value(after, name, **labels) - value(before, name, **labels)
        for name, labels in {
            "control_plane_starts_total": {"outcome": "ready"},
            "control_plane_start_failures_total": {"reason": "StartFailed"},
            "control_plane_webhook_events_total": {},
            "control_plane_webhook_batch_events_count": {},
            "control_plane_webhook_lag_seconds_count": {},
        }.items()
    }
    assert moved["control_plane_starts_total"] == 1
    assert moved["control_plane_start_failures_total"] == 1
    assert moved["control_plane_webhook_events_total"] >= 3
    assert moved["control_plane_webhook_batch_events_count"] >= 1
    assert moved["control_plane_webhook_lag_seconds_count"] >= 3
    assert value(after, "control_plane_starts_total", outcome="error") >= 1
    # A start's stages and its whole walk, timed.
    assert value(after, "control_plane_start_seconds_count", stage="total") == 1
    assert value(after, "control_plane_start_seconds_count", stage="WAITING_FOR_SANDBOX") == 1
    assert value(after, "control_plane_start_seconds_count", stage="STARTING_CONVERSATION") == 1
    # The provider's calls, by call and outcome.
    assert (
        value(after, "control_plane_provider_call_seconds_count", call="create", outcome="ok") == 1
    )
    assert (
        value(after, "control_plane_provider_call_seconds_count", call="pause", outcome="ok") == 1
    )
    # What the database holds: one paused sandbox (of this provider), no start waiting.
    assert value(after, "control_plane_sandboxes", status="PAUSED", provider="process") == 1
    assert value(after, "control_plane_sandboxes", status="RUNNING") == 0
    assert value(after, "control_plane_start_tasks") == 0
    assert value(after, "control_plane_db_connections", state="checked_out") >= 0
    # Requests by route template, never by path.
    assert (
        value(
            after,
            "control_plane_http_requests_total",
            route="/api/v1/sandboxes/{sandbox_id}/pause",
            status="200",
        )
        == 1
    )

    # The agent's model call went through the LLM gateway: counted, its tokens and cost too
    # (counted once its answer has ended, in the background).
    assert value(after, "control_plane_llm_requests_total", outcome="forwarded") >= 1
    wait_for(
        lambda: (
            value(scrape(plane), "control_plane_llm_tokens_total", model="openai/test-model") > 0
        ),
        30,
        what="the gateway's tokens counted",
    )

    ids = {sid, cid, task["id"], failed["id"], user_key}
    ids |= {u["id"] for u in (client.get("/api/v1/users/me").json(),)}
    for (name, labels), _ in after.items():
        for label, text in labels:
            assert not any(i in text for i in ids), (name, label, text)


def test_only_the_operator_reads_them(plane: ControlPlane, tmp_path: Path) -> None:
    user = plane.new_user("mallory")
    url = plane.url + "/metrics"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": f"Bearer {user}"}).status_code == 401
    wrong = httpx.get(url, headers={"Authorization": f"Bearer {OPERATOR}x"})
    assert wrong.status_code == 401 and "operator" in wrong.text
    # A control plane with no operator key has no metrics to give.
    other = ControlPlane(make_config(tmp_path / "other")).start()
    try:
        assert httpx.get(other.url + "/metrics").status_code == 404
    finally:
        other.stop()
