"""Requests that arrive while a run starts, answers or ends: nothing lost, nothing doubled."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from tests.conftest import create
from tests.support.api import events, wait_status
from tests.support.llm import Reply, ScriptedLLM, call, text
from tests.support.server import ServerProcess
from tests.support.wait import wait_for

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e


def test_a_message_sent_while_the_model_answers_is_answered_too(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, Reply(text="answer to the first", delay=1.5), text("answer to the second"))
    conv = create(client, llm, key, tmp_path, message="first question", run=True)
    wait_for(lambda: llm.requests_for(key), what="the first LLM request")
    r = client.post(
        f"/api/conversations/{conv['id']}/events",
        json={"content": [{"type": "text", "text": "second question"}], "run": True},
    )
    assert r.status_code == 200
    assert wait_status(client, conv["id"], "finished") == "finished"
    requests = llm.requests_for(key)
    assert len(requests) == 2
    assert "second question" in str(requests[1]["messages"])
    replies = events(client, conv["id"], "MessageEvent", source__eq="agent")
    assert [m["llm_message"]["content"][0]["text"] for m in replies] == [
        "answer to the first",
        "answer to the second",
    ]


def test_runs_requested_together_start_one_loop(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, server: ServerProcess
) -> None:
    llm.script(key, Reply(text="once", delay=0.5), text("twice"))
    conv = create(client, llm, key, tmp_path, message="go")
    url = f"{server.url}/api/conversations/{conv['id']}/run"
    answers: list[int] = []

    def post() -> None:
        with server.client() as c:
            answers.append(c.post(url).status_code)

    threads = [threading.Thread(target=post) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [200] * 6
    assert wait_status(client, conv["id"], "finished") == "finished"
    # Every POST has answered, and one that starts a run moves the status to running before
    # it answers: so a second loop, had one started, would show here without any waiting.
    statuses = [
        e["value"]
        for e in events(client, conv["id"], "ConversationStateUpdateEvent")
        if e["key"] == "execution_status"
    ]
    assert statuses == ["running", "finished"]
    assert len(llm.requests_for(key)) == 1
    assert len(events(client, conv["id"], "MessageEvent", source__eq="agent")) == 1


def test_a_deleted_conversation_does_not_come_back(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, server: ServerProcess
) -> None:
    started = tmp_path / "hook-started"
    hook = {
        "UserPromptSubmit": [
            {"hooks": [{"type": "command", "command": f"touch {started}; sleep 2"}]}
        ]
    }
    llm.script(key, call("finish", message="should never run"))
    conv = create(client, llm, key, tmp_path, hook_config=hook)
    cid = conv["id"]
    answer: list[int] = []

    def send() -> None:
        with server.client() as c:
            answer.append(
                c.post(
                    f"/api/conversations/{cid}/events",
                    json={"content": [{"text": "go"}], "run": True},
                ).status_code
            )

    sender = threading.Thread(target=send)
    sender.start()
    wait_for(started.exists, what="the UserPromptSubmit hook to run")  # the message waits on it
    assert client.delete(f"/api/conversations/{cid}").status_code == 200
    sender.join()
    # The message's hook finished after the delete: its verdict has no conversation to go to.
    assert answer == [404]
    # The send was the last request in flight; it has answered, so nothing can write now.
    assert client.get(f"/api/conversations/{cid}").status_code == 404
    assert not (server.state_dir / "conversations" / cid.replace("-", "")).exists()
    assert llm.requests_for(key) == []
