"""The audit log (issue 42.4) through a real control plane: each security-relevant act, made
through the API, the `keys` command or the lifecycle's timers, is read back by the operator
(`GET /api/v1/admin/audit`, `control-plane audit`) with who, what, when and from where; a
user's key is refused it (401) and, without CONTROL_PLANE_OPERATOR_KEY, the route is not there
(404); records outlive the sandbox they describe; no secret's value or key is in them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.config._checks import PositiveDataAcceptanceConfig

from tests.agent_server.api.test_fuzz import CHECKS, TIMEOUT, configure
from tests.control_plane.api.test_api import wait_running
from tests.control_plane.support import ControlPlane, ShiftedClock, make_config
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

OPERATOR_KEY = "op-" + uuid.uuid4().hex
SECRET = "ghp_" + uuid.uuid4().hex
OTHER_SECRET = "other-" + uuid.uuid4().hex
LLM_KEY = "sk-" + uuid.uuid4().hex
ADMIN = "/api/v1/admin/audit"


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[tuple[ControlPlane, ShiftedClock]]:
    """A control plane with an operator key, whose lifecycle acts when the test moves its clock."""
    clock = ShiftedClock()
    config = make_config(
        tmp_path / "cp",
        operator_key=OPERATOR_KEY,
        idle_seconds=600,
        deletion_seconds=600,
        lifecycle_interval=0.2,
    )
    server = ControlPlane(config, clock).start()
    yield server, clock
    server.stop()


def cli(plane: ControlPlane, *args: str) -> str:
    """`control-plane ARGS` on the plane's state directory, as an operator runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "control_plane", *args],
        env={**os.environ, "CONTROL_PLANE_STATE_DIR": str(plane.config.state_dir)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def everything(plane: ControlPlane, **params: Any) -> list[dict[str, Any]]:
    """Every record the admin route gives, page after page (newest first)."""
    operator = plane.client(OPERATOR_KEY)
    found: list[dict[str, Any]] = []
    page: str | None = None
    while True:
        asked = {**params, **({"page_id": page} if page else {})}
        r = operator.get(ADMIN, params=asked)
        assert r.status_code == 200, r.text
        found += r.json()["items"]
        page = r.json()["next_page_id"]
        if page is None:
            return found


def acts(records: list[dict[str, Any]]) -> set[tuple[str, str, str | None]]:
    return {(r["actor"], r["action"], r["target_id"]) for r in records}


def test_every_act_is_recorded_and_read_by_the_operator_alone(
    plane: tuple[ControlPlane, ShiftedClock],
) -> None:
    server, clock = plane
    began = datetime.now(UTC) - timedelta(seconds=1)

    # The `keys` command: made, and revoked by id and by user.
    alice_key = cli(server, "keys", "create", "--user", "alice").strip()
    bob_key = cli(server, "keys", "create", "--user", "bob").strip()
    cli(server, "keys", "create", "--user", "carol")
    cli(server, "keys", "create", "--user", "dave")
    [dave_key_id] = [
        line.split("\t")[0] for line in cli(server, "keys", "list", "--user", "dave").splitlines()
    ]
    cli(server, "keys", "revoke", dave_key_id)
    cli(server, "keys", "revoke", "--user", "carol")

    alice = server.client(alice_key)
    me = alice.get("/api/v1/users/me").json()["id"]
    bob_id = server.client(bob_key).get("/api/v1/users/me").json()["id"]

    # Settings and secrets.
    r = alice.patch(
        "/api/v1/settings",
        json={
            "llm_api_key": LLM_KEY,
            "grouping_strategy": "GROUP_BY_NEWEST",
            "secrets": {"GITHUB_TOKEN": SECRET, "OTHER": OTHER_SECRET},
        },
    )
    assert r.status_code == 200, r.text
    assert alice.patch("/api/v1/settings", json={"secrets": {"OTHER": None}}).status_code == 200

    # A sandbox: started, its secret read by it, its policy changed, paused, resumed ...
    r = alice.post("/api/v1/sandboxes", json={})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    running = wait_running(alice, sid)
    session_key = running["session_api_key"]
    r = httpx.get(
        f"{server.url}/api/v1/sandboxes/{sid}/settings/secrets/GITHUB_TOKEN",
        headers={"X-Session-API-Key": session_key},
    )
    assert r.status_code == 200 and r.text == SECRET
    policy = {"mode": "allowlist", "allow": ["example.com:443"]}
    r = alice.patch(f"/api/v1/sandboxes/{sid}", json={"network_policy": policy})
    assert r.status_code == 200, r.text
    assert alice.post(f"/api/v1/sandboxes/{sid}/pause").json()["status"] == "PAUSED"
    assert alice.post(f"/api/v1/sandboxes/{sid}/pause").status_code == 200  # already: no act
    assert alice.post(f"/api/v1/sandboxes/{sid}/resume").json()["status"] == "RUNNING"

    # ... then paused by the idle timer and deleted by the deletion timer (the `system`).
    def status() -> str:
        found: str = alice.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["status"]
        return found

    clock.offset += 601
    wait_for(lambda: status() == "PAUSED", 30, what="the idle pause")
    clock.offset += 601
    wait_for(lambda: status() == "MISSING", 30, what="the deletion time")

    # Another, deleted by its user.
    other = alice.post("/api/v1/sandboxes", json={}).json()["id"]
    wait_running(alice, other)
    r = alice.delete(f"/api/v1/sandboxes/{other}", params={"sandbox_id": other})
    assert r.status_code == 200, r.text

    records = everything(server)
    assert acts(records) >= {
        ("cli", "api_key.create", me),
        ("cli", "api_key.create", bob_id),
        ("cli", "api_key.revoke", dave_key_id),
        ("cli", "api_key.revoke", "carol"),
        (me, "settings.update", me),
        (me, "secret.set", "GITHUB_TOKEN"),
        (me, "secret.set", "OTHER"),
        (me, "secret.delete", "OTHER"),
        (me, "sandbox.create", sid),
        (f"sandbox:{sid}", "secret.read", "GITHUB_TOKEN"),
        (me, "sandbox.network_policy", sid),
        (me, "sandbox.pause", sid),
        (me, "sandbox.resume", sid),
        ("system", "sandbox.pause", sid),
        ("system", "sandbox.delete", sid),
        (me, "sandbox.create", other),
        (me, "sandbox.delete", other),
    }
    # Once each: the second pause of a PAUSED sandbox changed nothing.
    assert [r["actor"] for r in records if r["action"] == "sandbox.pause"] == ["system", me]
    by_act = {(r["actor"], r["action"], r["target_id"]): r for r in records}
    # From where: the client's address, the command, the control-plane process.
    assert by_act[(me, "sandbox.create", sid)]["source"] == "127.0.0.1"
    assert by_act[("cli", "api_key.create", me)]["source"] == "cli"
    assert by_act[("system", "sandbox.pause", sid)]["source"] == "local"
    assert by_act[("system", "sandbox.pause", sid)]["details"] == {"reason": "IDLE"}
    assert by_act[("system", "sandbox.delete", sid)]["details"] == {"reason": "DELETION_TIME"}
    # Whose: the account each concerns, by id (a revoked key's owner found by name).
    assert by_act[("cli", "api_key.revoke", "carol")]["user_id"] is not None
    assert by_act[(f"sandbox:{sid}", "secret.read", "GITHUB_TOKEN")]["user_id"] == me
    assert by_act[(me, "sandbox.network_policy", sid)]["details"] == {"network_policy": policy}
    assert set(by_act[(me, "settings.update", me)]["details"]["fields"]) == {
        "llm_api_key",
        "grouping_strategy",
    }
    # When: in order, newest first, within the test.
    moments = [datetime.fromisoformat(r["at"]) for r in records]
    assert moments == sorted(moments, reverse=True) and moments[-1] >= began

    # Never a secret, the LLM key, an API key or a session key.
    text = json.dumps(records) + cli(server, "audit", "--limit", "10000")
    for value in (SECRET, OTHER_SECRET, LLM_KEY, alice_key, bob_key, session_key):
        assert value not in text

    # Filters, and the CLI's view of the same log.
    mine = everything(server, user="alice")
    assert mine and all(me in (r["user_id"], r["actor"]) for r in mine)
    assert {r["target_id"] for r in everything(server, action="sandbox.delete")} == {sid, other}
    assert {r["action"] for r in everything(server, action="sandbox.*")} == {
        "sandbox.create",
        "sandbox.network_policy",
        "sandbox.pause",
        "sandbox.resume",
        "sandbox.delete",
    }
    assert everything(server, actor="system", target_id=other) == []
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert everything(server, since=future) == []
    lines = cli(server, "audit", "--user", "alice", "--action", "sandbox.delete").splitlines()
    assert {json.loads(line)["target_id"] for line in lines} == {sid, other}
    table = cli(server, "audit", "--actor", "system", "--table").splitlines()
    assert table[0].split()[:3] == ["at", "actor", "action"] and len(table) == 3
    assert cli(server, "audit", "--since", future) == ""

    # Paged like the other searches: pages meet without a gap or an overlap.
    paged = everything(server, limit=3)
    assert [r["id"] for r in paged] == [r["id"] for r in records]


def test_a_users_key_is_refused_and_bad_input_is_422(
    plane: tuple[ControlPlane, ShiftedClock],
) -> None:
    server, _ = plane
    bob = server.client(server.new_user("bob"))
    for client in (bob, server.client(None), server.client("op-wrong")):
        r = client.get(ADMIN)
        assert r.status_code == 401, r.text
        assert isinstance(r.json()["detail"], str)
    operator = server.client(OPERATOR_KEY)
    for params in (
        {"limit": "0"},
        {"limit": "101"},
        {"page_id": "x"},
        {"since": "2026-01-01T00:00:00"},  # no offset
        {"until": "1700000000"},  # a number is not a moment
        {"since": "9999-12-31T23:00:00-10:00"},  # past year 9999 in UTC
        {"user": "a\x00b"},
        {"action": "a" * 66},
        {"user": ["a", "b"]},  # one value
    ):
        r = operator.get(ADMIN, params=params)
        assert r.status_code == 422, (params, r.text)
        assert isinstance(r.json()["detail"], list)


def test_without_the_operator_key_setting_the_route_is_not_there(
    control_plane: ControlPlane,
) -> None:
    user = control_plane.client(control_plane.new_user("erin"))
    for client in (user, control_plane.client(None), control_plane.client(OPERATOR_KEY)):
        r = client.get(ADMIN)
        assert r.status_code == 404, r.text


def test_the_route_answers_the_operator_as_documented(
    plane: tuple[ControlPlane, ShiftedClock],
) -> None:
    """The fuzz of every operation (test_fuzz) sends a user's key, which this route refuses:
    here the operator's, so what the document says of its 200 and 422 is held too."""
    server, _ = plane
    cli(server, "keys", "create", "--user", "fuzz")  # a record to read
    loaded = configure(schemathesis.openapi.from_url(server.url + "/openapi.json"))
    loaded.config.checks.positive_data_acceptance = PositiveDataAcceptanceConfig(
        expected_statuses=["2xx"]
    )
    operation = loaded[ADMIN]["GET"]
    headers = {"Authorization": f"Bearer {OPERATOR_KEY}"}
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

        @given(operation.as_strategy(mode))
        @settings(
            max_examples=25,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def one(case: Any) -> None:
            response = case.call(base_url=server.url, headers=headers, timeout=TIMEOUT)
            case.validate_response(response, checks=CHECKS)

        one()
