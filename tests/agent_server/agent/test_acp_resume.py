"""An ACP conversation outlives the server: after a SIGKILL and a restart, the agent's own
session is resumed with session/load (the agent remembers), what it replays is not stored
again, and when it cannot be resumed the user is told the agent's memory was lost."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent_server.agent.test_acp import AGENT
from tests.support.server import ServerProcess
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "state").start()
    yield proc
    proc.stop()


def create(http: httpx.Client, workspace: Path, *args: str) -> str:
    r = http.post(
        "/api/conversations",
        json={
            "agent": {"kind": "ACPAgent", "acp_command": AGENT, "acp_args": list(args)},
            "workspace": {"working_dir": str(workspace)},
        },
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def items(http: httpx.Client, cid: str, **params: Any) -> list[dict[str, Any]]:
    r = http.get(f"/api/conversations/{cid}/events/search", params={"limit": 100, **params})
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


def said(http: httpx.Client, cid: str) -> list[str]:
    return [
        e["llm_message"]["content"][0]["text"]
        for e in items(http, cid, kind__eq="MessageEvent", source__eq="agent")
    ]


def turn(http: httpx.Client, cid: str, text: str) -> list[str]:
    """Send `text`, wait for the agent's answer and the run's end; what the agent said."""
    before = len(said(http, cid))
    r = http.post(
        f"/api/conversations/{cid}/events",
        json={"role": "user", "run": True, "content": [{"type": "text", "text": text}]},
    )
    assert r.status_code == 200, r.text
    wait_for(
        lambda: (
            len(said(http, cid)) > before
            and http.get(f"/api/conversations/{cid}").json()["execution_status"]
            in ("finished", "error")
        ),
        timeout=60,
        what=f"the answer to {text!r}",
    )
    return said(http, cid)


def restart(server: ServerProcess) -> httpx.Client:
    server.kill()
    server.start()
    return server.client()


def test_a_killed_server_resumes_the_agents_session(server: ServerProcess, tmp_path: Path) -> None:
    remembers, forgets = tmp_path / "remembers.json", tmp_path / "forgets.json"
    with server.client() as http:
        kept = create(http, tmp_path / "ws1", "--sessions", str(remembers))
        lost = create(http, tmp_path / "ws2", "--sessions", str(forgets))
        plain = create(http, tmp_path / "ws3")  # an agent without loadSession
        for cid in (kept, lost, plain):
            assert turn(http, cid, "say first words") == ["first words"]
        costs = create(http, tmp_path / "ws4", "--sessions", str(tmp_path / "costs.json"))
        turn(http, costs, "say spent\nusage 10 5 0.5")  # the session's cost so far: $0.50
    forgets.unlink()  # that agent forgets its sessions meanwhile

    with restart(server) as http:
        assert turn(http, kept, "recall") == ["first words", "I remember: say first words"]
        assert turn(http, kept, "sessions")[-1] == "sessions opened: 1"  # loaded, not new
        # What the agent replayed while loading (messages, a tool call) is not stored again.
        assert not items(http, kept, kind__eq="ACPToolCallEvent")
        assert not items(http, kept, kind__eq="ServerErrorEvent")
        assert [
            e["llm_message"]["content"][0]["text"]
            for e in items(http, kept, kind__eq="MessageEvent", source__eq="user")
        ] == ["say first words", "recall", "sessions"]
        # The resumed session's cumulative cost goes on from what was counted: +$0.25.
        turn(http, costs, "say spent more\nusage 10 5 0.75")
        metrics = http.get(f"/api/conversations/{costs}").json()["metrics"]
        assert metrics["accumulated_cost"] == pytest.approx(0.75)

        # Not resumable: a new session, and a note saying why the memory is gone.
        for cid, why in ((lost, "session/load failed"), (plain, "does not offer session/load")):
            assert turn(http, cid, "recall")[-1] == "I remember: "
            [note] = items(http, cid, kind__eq="ServerErrorEvent")
            assert note["code"] == "ACPSessionLost"
            assert why in note["detail"] and "without its memory" in note["detail"]
            assert http.get(f"/api/conversations/{cid}").json()["execution_status"] == "finished"

    # The new session is the one kept from then on: resumed at the next restart, no new note.
    with restart(server) as http:
        assert turn(http, lost, "recall")[-1] == "I remember: recall"
        assert len(items(http, lost, kind__eq="ServerErrorEvent")) == 1


def test_a_crashed_agent_is_resumed_in_the_same_server(
    server: ServerProcess, tmp_path: Path
) -> None:
    with server.client() as http:
        cid = create(http, tmp_path / "ws", "--sessions", str(tmp_path / "s.json"))
        turn(http, cid, "say before the crash")
        r = http.post(
            f"/api/conversations/{cid}/events",
            json={"role": "user", "run": True, "content": [{"type": "text", "text": "crash 3"}]},
        )
        assert r.status_code == 200
        wait_for(
            lambda: items(http, cid, kind__eq="ConversationErrorEvent"),
            timeout=60,
            what="the crash's error",
        )
        wait_for(
            lambda: http.get(f"/api/conversations/{cid}").json()["execution_status"] == "error",
            what="the run's end",
        )
        assert turn(http, cid, "recall")[-1] == "I remember: say before the crash | crash 3"
        assert not items(http, cid, kind__eq="ServerErrorEvent")


def test_a_side_question_after_a_restart_changes_nothing(
    server: ServerProcess, tmp_path: Path
) -> None:
    """ask_agent may start the agent to answer, but the session it could not resume is told,
    and the new one kept, by the next turn: the side question leaves the events and the
    saved session as they were."""
    with server.client() as http:
        cid = create(http, tmp_path / "ws")  # an agent without loadSession
        turn(http, cid, "say first words")
    [saved] = (tmp_path / "state").rglob("acp.json")
    before = saved.read_text()

    with restart(server) as http:
        r = http.post(f"/api/conversations/{cid}/ask_agent", json={"question": "quote first"})
        assert r.status_code == 200, r.text
        assert r.json()["response"] == "first is in the prompt"
        assert not items(http, cid, kind__eq="ServerErrorEvent")
        assert saved.read_text() == before
        assert turn(http, cid, "recall")[-1] == "I remember: "
        [note] = items(http, cid, kind__eq="ServerErrorEvent")
        assert note["code"] == "ACPSessionLost" and "without its memory" in note["detail"]
