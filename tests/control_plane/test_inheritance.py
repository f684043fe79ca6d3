"""What a sandbox inherits from its account (issue 26: the Cloud workspace's get_llm() and
get_secrets()), tried by another tenant as an attacker would: with its own account key, its own
sandbox's session key, and without either. Only a sandbox's own session key reads its user's
secret values; /users/me gives the LLM as a sandbox calls it (the LLM gateway, the sandbox's
token) only to a caller that also shows the session key of one of its own live sandboxes, and
the user's LLM key never (issue 36)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.control_plane.api.test_api import wait_running
from tests.control_plane.support import ControlPlane, configure_llm

ALICE_LLM_KEY = "sk-alice-llm-key-5521"
ALICE_TOKEN = "ghp_alice-token-8812"


def tenant(
    plane: ControlPlane, name: str, llm_key: str, secrets: dict[str, str]
) -> tuple[httpx.Client, str, str]:
    """An account with settings and a RUNNING sandbox: its client, sandbox id and session key."""
    client = plane.client(plane.new_user(name))
    configure_llm(client, "http://127.0.0.1:9/v1", llm_api_key=llm_key)
    assert client.patch("/api/v1/settings", json={"secrets": secrets}).is_success
    r = client.post("/api/v1/sandboxes", json={})
    assert r.status_code == 201, r.text
    sandbox = wait_running(client, r.json()["id"])
    return client, sandbox["id"], sandbox["session_api_key"]


def me(client: httpx.Client, session: str | None = None, expose: bool = True) -> httpx.Response:
    headers = {"X-Session-API-Key": session} if session else {}
    return client.get("/api/v1/users/me", params={"expose_secrets": expose}, headers=headers)


def secrets(
    plane: ControlPlane, sid: str, session: str | None, name: str = "", **headers: Any
) -> httpx.Response:
    if session is not None:
        headers["X-Session-API-Key"] = session
    path = f"/api/v1/sandboxes/{sid}/settings/secrets" + (f"/{name}" if name else "")
    return httpx.get(plane.url + path, headers=headers)


def test_only_a_sandboxs_own_key_reads_its_users_llm_key_and_secrets(
    control_plane: ControlPlane,
) -> None:
    alice, a_sid, a_session = tenant(control_plane, "alice", ALICE_LLM_KEY, {"GH": ALICE_TOKEN})
    bob, b_sid, b_session = tenant(control_plane, "bob", "sk-bob-key-0000", {"BOB": "bob-value-1"})

    # users/me: masked without expose_secrets; with it, only beside a session key of one's own.
    assert ALICE_LLM_KEY not in me(alice, expose=False).text
    assert me(alice, expose=False).json()["llm_api_key"] == "**********"
    assert me(alice).status_code == 401
    assert me(alice, "not-a-session-key").status_code == 401
    assert me(alice, b_session).status_code == 403  # bob's sandbox's key
    assert me(bob, a_session).status_code == 403  # alice's sandbox's key, bob's account
    for refused in (me(alice), me(alice, b_session), me(bob, a_session)):
        assert ALICE_LLM_KEY not in refused.text
    exposed = me(alice, a_session).json()
    assert exposed["llm_api_key"].startswith(f"sbt_{a_sid}_") and ALICE_LLM_KEY not in str(exposed)
    assert exposed["llm_base_url"].endswith("/api/v1/llm")

    # The sandbox-scoped secrets: the sandbox's own session key, and nothing else.
    assert secrets(control_plane, a_sid, a_session).json() == {
        "secrets": [{"name": "GH", "description": None}]
    }
    assert secrets(control_plane, a_sid, a_session, "GH").text == ALICE_TOKEN
    assert secrets(control_plane, a_sid, a_session, "NOPE").status_code == 404
    assert secrets(control_plane, a_sid, a_session, "bad-name").status_code == 422
    tries = [
        secrets(control_plane, a_sid, b_session, "GH"),  # bob's key on alice's sandbox
        secrets(control_plane, a_sid, b_session),
        secrets(control_plane, b_sid, a_session, "GH"),  # alice's key on bob's: not hers
        secrets(control_plane, a_sid, None, "GH"),  # no key
        secrets(
            control_plane,
            a_sid,
            None,
            "GH",  # an account key is not a session key
            Authorization=alice.headers["Authorization"],
        ),
    ]
    assert [r.status_code for r in tries] == [403, 403, 403, 401, 401]
    assert all(ALICE_TOKEN not in r.text for r in tries)

    # A deleted sandbox's key reads nothing any more.
    assert alice.delete(f"/api/v1/sandboxes/{a_sid}", params={"sandbox_id": a_sid}).is_success
    assert secrets(control_plane, a_sid, a_session, "GH").status_code == 401
    assert me(alice, a_session).status_code == 401
