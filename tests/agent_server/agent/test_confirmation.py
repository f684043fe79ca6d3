"""Confirmation mode (SPEC 2.7 SecurityRisk, 3.2 WAITING_FOR_CONFIRMATION, 6.2): end to end.

The scripted model fills `security_risk` as a real one would; a file_editor `create` is the
action under test because its effect (the file) is what a person would check. The last test
restarts this module's server, so it stays last.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import create
from tests.support.api import events, send, status, wait_status
from tests.support.llm import Reply, ScriptedLLM, call, calls, text
from tests.support.server import ServerProcess

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

SUPERSEDED = "superseded by a new user message"


def write(path: Path, risk: str | None = None, content: str = "x") -> Reply:
    """A file_editor create of `path`, with the model's risk assessment (None: left out)."""
    extra = {} if risk is None else {"security_risk": risk}
    return call("file_editor", command="create", path=str(path), file_text=content, **extra)


def write_args(path: Path, risk: str | None = None) -> tuple[str, dict[str, Any]]:
    extra = {} if risk is None else {"security_risk": risk}
    return ("file_editor", {"command": "create", "path": str(path), "file_text": "x", **extra})


def respond(
    client: httpx.Client, cid: str, accept: bool, reason: str | None = None
) -> httpx.Response:
    body: dict[str, Any] = {"accept": accept}
    if reason is not None:
        body["reason"] = reason
    return client.post(f"/api/conversations/{cid}/events/respond_to_confirmation", json=body)


def settled(client: httpx.Client, cid: str, *wanted: str) -> str:
    """wait_status, then a moment for the run task to end.

    waiting_for_confirmation is visible before the run's task has ended, and until it has, a
    respond is refused and a message rejects nothing (see test_acting_at_once_on_waiting_is_heard);
    the tests of other behaviour give it that moment.
    """
    reached = wait_status(client, cid, *wanted)
    time.sleep(0.3)
    return reached


def statuses(client: httpx.Client, cid: str) -> list[str]:
    return [
        e["value"]
        for e in events(client, cid, "ConversationStateUpdateEvent")
        if e["key"] == "execution_status"
    ]


def start(
    client: httpx.Client,
    llm: ScriptedLLM,
    key: str,
    workspace: Path,
    policy: dict[str, Any] | None,
    **extra: Any,
) -> str:
    if policy is not None:
        extra["confirmation_policy"] = policy
    conv = create(
        client, llm, key, workspace, tools=["file_editor"], message="go", run=True, **extra
    )
    return conv["id"]


# -- which actions wait ----------------------------------------------------------------------


def test_never_confirm_runs_every_risk_and_records_it(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    names = ["low.txt", "high.txt", "none.txt", "lower.txt", "odd.txt"]
    llm.script(
        key,
        calls(
            write_args(tmp_path / "low.txt", "LOW"),
            write_args(tmp_path / "high.txt", "HIGH"),
            write_args(tmp_path / "none.txt"),
            write_args(tmp_path / "lower.txt", "high"),
            write_args(tmp_path / "odd.txt", "EXTREME"),
        ),
        call("finish", message="done"),
    )
    cid = start(client, llm, key, tmp_path, None)  # NeverConfirm is the default
    assert wait_status(client, cid) == "finished"
    assert all((tmp_path / n).exists() for n in names)
    actions = events(client, cid, "ActionEvent")
    assert [a["security_risk"] for a in actions[:5]] == [
        "LOW",
        "HIGH",
        "UNKNOWN",
        "HIGH",
        "UNKNOWN",
    ]
    assert actions[-1]["tool_name"] == "finish" and actions[-1]["security_risk"] == "UNKNOWN"
    assert "waiting_for_confirmation" not in statuses(client, cid)
    info = client.get(f"/api/conversations/{cid}").json()
    assert info["confirmation_policy"] == {"kind": "NeverConfirm"}


@pytest.mark.parametrize(
    "policy, risk, waits",
    [
        ({"kind": "AlwaysConfirm"}, "LOW", True),
        ({"kind": "AlwaysConfirm"}, "HIGH", True),
        ({"kind": "AlwaysConfirm"}, None, True),
        ({"kind": "ConfirmRisky"}, "LOW", False),
        ({"kind": "ConfirmRisky"}, "MEDIUM", False),
        ({"kind": "ConfirmRisky"}, "HIGH", True),
        ({"kind": "ConfirmRisky"}, None, True),
        ({"kind": "ConfirmRisky", "threshold": "HIGH", "confirm_unknown": False}, None, False),
        ({"kind": "ConfirmRisky", "threshold": "MEDIUM"}, "LOW", False),
        ({"kind": "ConfirmRisky", "threshold": "MEDIUM"}, "MEDIUM", True),
        ({"kind": "ConfirmRisky", "threshold": "MEDIUM"}, "HIGH", True),
        ({"kind": "ConfirmRisky", "threshold": "LOW", "confirm_unknown": False}, "LOW", True),
        ({"kind": "ConfirmRisky", "threshold": "LOW", "confirm_unknown": False}, None, False),
    ],
)
def test_policy_and_risk_decide_what_waits(
    client: httpx.Client,
    llm: ScriptedLLM,
    key: str,
    tmp_path: Path,
    policy: dict[str, Any],
    risk: str | None,
    waits: bool,
) -> None:
    target = tmp_path / "out.txt"
    llm.script(key, write(target, risk), call("finish", message="done"))
    cid = start(client, llm, key, tmp_path, policy)
    assert wait_status(client, cid) == ("waiting_for_confirmation" if waits else "finished")
    [action] = [a for a in events(client, cid, "ActionEvent") if a["tool_name"] == "file_editor"]
    assert action["security_risk"] == (risk or "UNKNOWN")
    assert target.exists() is not waits
    if waits:
        # Stored, not run: no observation of any kind, and the model was not asked again.
        assert not events(client, cid, "ObservationEvent")
        assert not events(client, cid, "UserRejectObservation")
        assert not events(client, cid, "AgentErrorEvent")
        assert len(llm.requests_for(key)) == 1


def test_tools_that_change_nothing_never_wait(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(
        key,
        call("think", thought="plan", security_risk="HIGH"),
        call("finish", message="done", security_risk="HIGH"),
    )
    cid = start(client, llm, key, tmp_path, {"kind": "AlwaysConfirm"})
    assert wait_status(client, cid) == "finished"
    assert "waiting_for_confirmation" not in statuses(client, cid)


def test_one_risky_call_holds_the_whole_response(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(
        key,
        calls(write_args(tmp_path / "safe.txt", "LOW"), write_args(tmp_path / "risky.txt", "HIGH")),
    )
    cid = start(client, llm, key, tmp_path, {"kind": "ConfirmRisky"})
    assert settled(client, cid) == "waiting_for_confirmation"
    assert not (tmp_path / "safe.txt").exists() and not (tmp_path / "risky.txt").exists()
    assert len(events(client, cid, "ActionEvent")) == 2


# -- accept, reject, a new message, run ------------------------------------------------------


def test_accept_runs_the_waiting_actions_and_the_loop_goes_on(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(
        key,
        calls(write_args(tmp_path / "a.txt", "HIGH"), write_args(tmp_path / "b.txt", "LOW")),
        text("both written"),
    )
    cid = start(client, llm, key, tmp_path, {"kind": "AlwaysConfirm"})
    assert settled(client, cid) == "waiting_for_confirmation"
    waiting = events(client, cid, "ActionEvent")

    r = respond(client, cid, True)
    assert r.status_code == 200, r.text
    assert wait_status(client, cid) == "finished"
    assert (tmp_path / "a.txt").exists() and (tmp_path / "b.txt").exists()
    # The very actions that waited ran (no new ActionEvents), each with its observation.
    assert events(client, cid, "ActionEvent") == waiting
    observations = events(client, cid, "ObservationEvent")
    assert [o["action_id"] for o in observations] == [a["id"] for a in waiting]
    assert statuses(client, cid) == ["running", "waiting_for_confirmation", "running", "finished"]
    # The loop went on: the model got both results and answered.
    second = llm.requests_for(key)[1]["messages"]
    assert [m["role"] for m in second[-2:]] == ["tool", "tool"]
    assert respond(client, cid, True).status_code == 409


def test_reject_adds_a_rejection_per_waiting_action(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(
        key,
        calls(write_args(tmp_path / "a.txt", "HIGH"), write_args(tmp_path / "b.txt", "HIGH")),
        text("understood"),
    )
    cid = start(client, llm, key, tmp_path, {"kind": "ConfirmRisky"})
    assert settled(client, cid) == "waiting_for_confirmation"
    waiting = events(client, cid, "ActionEvent")

    r = respond(client, cid, False, "not on a Friday")
    assert r.status_code == 200, r.text
    assert status(client, cid) == "idle"
    rejections = events(client, cid, "UserRejectObservation")
    assert [r["action_id"] for r in rejections] == [a["id"] for a in waiting]
    assert [r["tool_call_id"] for r in rejections] == [a["tool_call_id"] for a in waiting]
    assert all(r["rejection_source"] == "user" for r in rejections)
    assert all(r["rejection_reason"] == "not on a Friday" for r in rejections)
    assert not (tmp_path / "a.txt").exists() and not (tmp_path / "b.txt").exists()
    assert not events(client, cid, "ObservationEvent")
    assert len(llm.requests_for(key)) == 1

    # Nothing waits any more; the model hears of the rejection with the next message.
    assert respond(client, cid, True).status_code == 409
    send(client, cid, "then do nothing")
    assert wait_status(client, cid) == "finished"
    assert not (tmp_path / "a.txt").exists()
    results = [m for m in llm.requests_for(key)[1]["messages"] if m["role"] == "tool"]
    assert len(results) == 2 and all("not on a Friday" in m["content"] for m in results)


def test_reject_without_a_reason_has_the_default_reason(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, write(tmp_path / "a.txt", "HIGH"))
    cid = start(client, llm, key, tmp_path, {"kind": "AlwaysConfirm"})
    assert settled(client, cid) == "waiting_for_confirmation"
    assert respond(client, cid, False).status_code == 200
    [rejection] = events(client, cid, "UserRejectObservation")
    assert rejection["rejection_reason"].startswith("User rejected the action")
    assert rejection["rejection_source"] == "user"


def test_a_new_message_while_waiting_rejects_and_never_runs(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    target = tmp_path / "danger.txt"
    llm.script(key, write(target, "HIGH"), text("ok, dropped it"))
    cid = start(client, llm, key, tmp_path, {"kind": "AlwaysConfirm"})
    assert settled(client, cid) == "waiting_for_confirmation"
    [waiting] = events(client, cid, "ActionEvent")

    send(client, cid, "never mind, do something else")
    assert wait_status(client, cid, "finished") == "finished"
    [rejection] = events(client, cid, "UserRejectObservation")
    assert rejection["action_id"] == waiting["id"]
    assert rejection["rejection_reason"] == SUPERSEDED
    assert rejection["rejection_source"] == "user"
    assert not events(client, cid, "ObservationEvent")
    # Neither the message nor anything after it approved the action.
    assert respond(client, cid, True).status_code == 409
    assert not target.exists()
    second = llm.requests_for(key)[1]["messages"]
    assert second[-2]["role"] == "tool" and SUPERSEDED in second[-2]["content"]
    assert second[-1]["role"] == "user"
    assert second[-1]["content"][0]["text"] == "never mind, do something else"


def test_a_new_message_without_run_also_rejects(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, write(tmp_path / "a.txt", "HIGH"))
    cid = start(client, llm, key, tmp_path, {"kind": "AlwaysConfirm"})
    assert settled(client, cid) == "waiting_for_confirmation"
    send(client, cid, "hold on", run=False)
    assert status(client, cid) == "idle"
    [rejection] = events(client, cid, "UserRejectObservation")
    assert rejection["rejection_reason"] == SUPERSEDED
    assert not (tmp_path / "a.txt").exists()


def test_run_while_waiting_runs_the_waiting_actions(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    # Calling run again is how the OpenHands SDK accepts (its agent server does the same).
    target = tmp_path / "a.txt"
    llm.script(key, write(target, "HIGH"), call("finish", message="done"))
    cid = start(client, llm, key, tmp_path, {"kind": "AlwaysConfirm"})
    assert settled(client, cid) == "waiting_for_confirmation"
    [waiting] = events(client, cid, "ActionEvent")

    for _ in range(2):  # a second run while the first runs changes nothing
        r = client.post(f"/api/conversations/{cid}/run")
        assert r.status_code == 200, r.text
    assert wait_status(client, cid, "finished") == "finished"
    assert target.exists()
    # The very action that waited ran, once; no new ActionEvent for it.
    [observation] = [
        o for o in events(client, cid, "ObservationEvent") if o["tool_name"] == "file_editor"
    ]
    assert observation["action_id"] == waiting["id"]
    assert [a["id"] for a in events(client, cid, "ActionEvent")][0] == waiting["id"]
    assert not events(client, cid, "UserRejectObservation")


def test_accept_when_nothing_waits_is_409_and_reject_a_no_op(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    conv = create(
        client,
        llm,
        key,
        tmp_path,
        tools=["file_editor"],
        confirmation_policy={"kind": "AlwaysConfirm"},
    )
    r = respond(client, conv["id"], True)  # nothing to run
    assert r.status_code == 409, r.text
    assert "idle" in r.text
    # Rejecting nothing changes nothing (the OpenHands SDK calls it freely).
    r = respond(client, conv["id"], False)
    assert r.status_code == 200, r.text
    assert status(client, conv["id"]) == "idle"
    assert not events(client, conv["id"], "UserRejectObservation")

    llm.script(key, call("finish", message="done"))
    send(client, conv["id"], "go")
    assert wait_status(client, conv["id"]) == "finished"
    assert respond(client, conv["id"], True).status_code == 409
    missing = "/api/conversations/00000000-0000-4000-8000-000000000000"
    assert (
        client.post(missing + "/events/respond_to_confirmation", json={"accept": True}).status_code
        == 404
    )


def test_acting_at_once_on_waiting_is_heard(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    # A client that acts the moment it sees the status; the window is short, so try a few.
    for i in range(20):
        k = f"{key}-{i}"
        llm.script(k, write(tmp_path / f"f{i}.txt", "HIGH"), text("ok"))
        conv = create(
            client,
            llm,
            k,
            tmp_path,
            tools=["file_editor"],
            message="go",
            run=True,
            confirmation_policy={"kind": "AlwaysConfirm"},
        )
        while status(client, conv["id"]) != "waiting_for_confirmation":
            pass
        if i % 2:
            r = respond(client, conv["id"], True)
            assert r.status_code == 200, f"attempt {i}: {r.text}"
        else:
            send(client, conv["id"], "never mind")
            assert events(client, conv["id"], "UserRejectObservation"), f"attempt {i}: not rejected"
            assert status(client, conv["id"]) != "waiting_for_confirmation"
        wait_status(client, conv["id"], "finished")


# -- the policy ------------------------------------------------------------------------------


def test_policy_switches_mid_conversation(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(
        key,
        write(tmp_path / "first.txt", "HIGH"),
        text("first done"),
        write(tmp_path / "second.txt", "HIGH"),
        call("finish", message="second done"),
        write(tmp_path / "third.txt", "LOW"),
        text("third done"),
    )
    cid = start(client, llm, key, tmp_path, None)
    assert wait_status(client, cid) == "finished"
    assert (tmp_path / "first.txt").exists()

    r = client.post(f"/api/conversations/{cid}/confirmation_policy", json={"kind": "AlwaysConfirm"})
    assert r.status_code == 200, r.text
    assert client.get(f"/api/conversations/{cid}").json()["confirmation_policy"] == {
        "kind": "AlwaysConfirm"
    }
    send(client, cid, "second")
    assert settled(client, cid, "waiting_for_confirmation") == "waiting_for_confirmation"
    assert not (tmp_path / "second.txt").exists()
    assert respond(client, cid, True).status_code == 200
    assert wait_status(client, cid, "finished") == "finished"
    assert (tmp_path / "second.txt").exists()

    # The OpenHands body shape, with a risky-only policy: a LOW action runs at once.
    policy = {"kind": "ConfirmRisky", "threshold": "MEDIUM", "confirm_unknown": False}
    r = client.post(f"/api/conversations/{cid}/confirmation_policy", json={"policy": policy})
    assert r.status_code == 200, r.text
    assert client.get(f"/api/conversations/{cid}").json()["confirmation_policy"] == policy
    send(client, cid, "third")
    assert wait_status(client, cid, "finished") == "finished"
    assert (tmp_path / "third.txt").exists()


@pytest.mark.parametrize(
    ("body", "loc", "type_"),
    [
        ({"kind": "Sometimes"}, ["body", "policy"], "union_tag_invalid"),
        (
            {"kind": "ConfirmRisky", "threshold": "EXTREME"},
            ["body", "policy", "ConfirmRisky", "threshold"],
            "literal_error",
        ),
        (
            {"policy": {"kind": "ConfirmRisky", "threshold": "UNKNOWN"}},
            ["body", "policy", "ConfirmRisky", "threshold"],
            "literal_error",
        ),
        ({}, ["body", "policy"], "missing"),
    ],
)
def test_an_invalid_policy_is_422_and_changes_nothing(
    client: httpx.Client,
    llm: ScriptedLLM,
    key: str,
    tmp_path: Path,
    body: dict[str, Any],
    loc: list[Any],
    type_: str,
) -> None:
    conv = create(client, llm, key, tmp_path, confirmation_policy={"kind": "AlwaysConfirm"})
    r = client.post(f"/api/conversations/{conv['id']}/confirmation_policy", json=body)
    assert r.status_code == 422, r.text
    assert [(e["loc"], e["type"]) for e in r.json()["detail"]] == [(loc, type_)]
    assert client.get(f"/api/conversations/{conv['id']}").json()["confirmation_policy"] == {
        "kind": "AlwaysConfirm"
    }


def test_an_invalid_policy_at_creation_is_422(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    r = client.post(
        "/api/conversations",
        json={
            "agent": {"llm": {"model": "openai/x", "base_url": llm.base_url(key), "api_key": "k"}},
            "workspace": {"working_dir": str(tmp_path)},
            "confirmation_policy": {"kind": "ConfirmRisky", "threshold": "SEVERE"},
        },
    )
    assert r.status_code == 422, r.text
    assert [(e["loc"], e["type"]) for e in r.json()["detail"]] == [
        (["body", "confirmation_policy", "ConfirmRisky", "threshold"], "literal_error")
    ]


# Last: it restarts this module's server.
def test_policy_and_waiting_actions_survive_a_restart(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, server: ServerProcess
) -> None:
    target = tmp_path / "after-restart.txt"
    policy = {"kind": "ConfirmRisky", "threshold": "MEDIUM", "confirm_unknown": False}
    # The action and `finish` in one response: after the accept no model call is needed.
    llm.script(key, calls(write_args(target, "MEDIUM"), ("finish", {"message": "done"})))
    conv = create(client, llm, key, tmp_path, tools=["file_editor"], llm_extra={"vision": False})
    cid = conv["id"]
    assert conv["confirmation_policy"] == {"kind": "NeverConfirm"}
    assert (
        client.post(f"/api/conversations/{cid}/confirmation_policy", json=policy).status_code == 200
    )
    send(client, cid, "go")
    assert settled(client, cid) == "waiting_for_confirmation"
    assert not target.exists()

    server.stop()
    server.start()
    info = client.get(f"/api/conversations/{cid}").json()
    assert info["confirmation_policy"] == policy
    assert info["execution_status"] == "waiting_for_confirmation"
    # Nothing asked for a run after the restart: the actions still wait.
    assert status(client, cid) == "waiting_for_confirmation" and not target.exists()
    assert statuses(client, cid)[-1] == "waiting_for_confirmation"

    assert respond(client, cid, True).status_code == 200
    assert wait_status(client, cid, "finished", "error") == "finished"
    assert target.exists()
