"""A start asks for its conversation the moment the sandbox's server answers, while the
sandbox's RUNNING is still being stored, and says READY only once RUNNING is stored."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from control_plane.models import SandboxStatus
from control_plane.store import sandboxes as rows
from tests.control_plane.support import ControlPlane, configure_llm, make_config, wait_task
from tests.support.llm import ScriptedLLM, call
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e


def test_the_first_model_call_comes_while_running_is_stored(
    tmp_path: Path, llm: ScriptedLLM, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = threading.Event()  # the RUNNING write may go on
    held: list[str] = []
    write = rows.set_status

    async def slow_running(
        db: Any, sandbox_id: str, status: SandboxStatus, *args: Any, **kw: Any
    ) -> Any:
        if status is SandboxStatus.RUNNING and not held:
            held.append(sandbox_id)
            while not stored.is_set():  # the control plane's loop goes on meanwhile
                await asyncio.sleep(0.01)
        return await write(db, sandbox_id, status, *args, **kw)

    monkeypatch.setattr(rows, "set_status", slow_running)
    plane = ControlPlane(make_config(tmp_path / "cp")).start()
    try:
        client = plane.client(plane.new_user("ann"))
        configure_llm(client, llm.base_url(key))
        llm.script(key, call("finish", message="done"))
        body = {"initial_message": {"content": [{"type": "text", "text": "go"}], "run": True}}
        answer = client.post("/api/v1/app-conversations", json=body)
        assert answer.status_code == 201, answer.text
        task_id = answer.json()["id"]

        # The conversation runs (its first model call came) while the row says STARTING.
        wait_for(lambda: llm.timings[key], 120, what="the first model call")
        sandbox = client.get("/api/v1/sandboxes", params={"id": held}).json()[0]
        assert sandbox["status"] == "STARTING"
        shown = client.get("/api/v1/app-conversations/start-tasks", params={"ids": task_id})
        assert shown.json()[0]["status"] == "STARTING_CONVERSATION"

        stored.set()
        task = wait_task(client, task_id)
        assert task["status"] == "READY", task
        sandbox = client.get("/api/v1/sandboxes", params={"id": held}).json()[0]
        assert sandbox["status"] == "RUNNING"
    finally:
        stored.set()
        plane.stop()
