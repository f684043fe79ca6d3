"""Creating a conversation: its files made in one thread hop, its record durable before it is
answered or listed, and a refused or failed creation leaving nothing behind."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agent_server.record import CreateConversation, StoredConversation
from events import MessageEvent, SystemPromptEvent
from tests.support.api import events as http_events
from tests.support.inprocess import InProcess, create_body, events, serve
from tests.support.server import ServerProcess

C = "/api/conversations"


class CountingExecutor(ThreadPoolExecutor):
    """The loop's default executor (asyncio.to_thread's), counting the jobs handed to it."""

    def __init__(self) -> None:
        super().__init__(max_workers=4)
        self.jobs = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.jobs += 1
        return super().submit(fn, *args, **kwargs)


def open_files(path: Path) -> list[str]:
    """The descriptors of this process open on `path`."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                found.append(fd)
        except OSError:
            pass
    return found


# -- thread hops -------------------------------------------------------------------------------


async def test_a_creation_with_its_first_message_takes_four_thread_jobs(
    srv: InProcess, tmp_path: Path
) -> None:
    """The files and the skills (side by side), then the two appends: six one after another
    before (working directory, record, skills, log, then each append)."""
    (tmp_path / "ws").mkdir()
    await srv.client.post(C, json=create_body(tmp_path / "ws"))  # what loads once is loaded
    executor = CountingExecutor()
    asyncio.get_running_loop().set_default_executor(executor)
    r = await srv.client.post(C, json=create_body(tmp_path / "ws", message="hello"))
    assert r.status_code == 201, r.text
    assert executor.jobs == 4
    kinds = [type(e) for e in await events(srv.conversation(r.json()["id"]))]
    assert kinds == [SystemPromptEvent, MessageEvent]


# -- the working directory ------------------------------------------------------------------


async def test_a_missing_working_directory_is_made(srv: InProcess, tmp_path: Path) -> None:
    where = tmp_path / "new" / "deeper"
    r = await srv.client.post(C, json=create_body(where, message="hi"))
    assert r.status_code == 201, r.text
    assert where.is_dir()


async def test_a_working_directory_that_cannot_be_made_is_refused_leaving_nothing(
    srv: InProcess, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("in the way")
    r = await srv.client.post(C, json=create_body(tmp_path / "a-file", message="hi"))
    assert r.status_code == 422, r.text
    [error] = r.json()["detail"]
    assert error["loc"] == ["body", "workspace", "working_dir"]
    assert error["msg"].startswith("cannot create the working directory")
    assert len(srv.services.conversations) == 0
    assert list((srv.config.state_dir / "conversations").iterdir()) == []


# -- the record, durable first ----------------------------------------------------------------


async def test_a_record_that_cannot_be_written_leaves_no_conversation(
    srv: InProcess, tmp_path: Path
) -> None:
    """The record is written last in the hop: when it fails, the conversation is not listed,
    its log is closed, and the same id can be created once the cause is gone."""
    cid = uuid.uuid4()
    directory = srv.config.state_dir / "conversations" / cid.hex
    (directory / "meta.json").mkdir(parents=True)  # a record cannot be renamed over it
    (directory / "meta.json" / "x").write_text("")
    request = CreateConversation.model_validate(
        create_body(tmp_path / "ws", message="hi", conversation_id=str(cid))
    )
    with pytest.raises(OSError):
        await srv.services.conversations.create(request)
    assert srv.services.conversations.get(cid) is None
    assert open_files(directory / "events.jsonl") == []
    assert [p.name for p in directory.iterdir() if p.name.endswith(".tmp")] == []

    (directory / "meta.json" / "x").unlink()
    (directory / "meta.json").rmdir()
    conv, created = await srv.services.conversations.create(request)
    assert created
    assert [type(e) for e in await events(conv)] == [SystemPromptEvent, MessageEvent]
    stored = StoredConversation.model_validate_json((directory / "meta.json").read_bytes())
    assert stored.id == cid


async def test_a_created_conversation_is_found_again_after_a_restart(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        r = await srv.client.post(C, json=create_body(tmp_path / "ws", message="remember me"))
        assert r.status_code == 201, r.text
        cid = r.json()["id"]
    async with serve(tmp_path) as srv:
        found = await events(srv.conversation(cid))
        assert [type(e) for e in found] == [SystemPromptEvent, MessageEvent]
        assert found[1].parent_id == found[0].id


def test_a_conversation_answered_is_kept_by_a_server_killed_at_once(tmp_path: Path) -> None:
    """SIGKILL right after the 201: the record and both first events were on disk before it."""
    server = ServerProcess(tmp_path / "state").start()
    body = create_body(tmp_path / "ws", message="kept")
    body["agent"] = {
        "llm": {"model": "openai/never", "base_url": "http://127.0.0.1:9", "api_key": "k-123"},
        "tools": [{"name": "terminal"}],
    }
    try:
        with server.client() as client:
            r = client.post(C, json=body)
            assert r.status_code == 201, r.text
            server.stop(signal.SIGKILL)
        cid = r.json()["id"]
        server.start()
        with server.client() as client:
            assert client.get(f"{C}/{cid}").status_code == 200
            kinds = [e["kind"] for e in http_events(client, cid)]
            assert kinds == ["SystemPromptEvent", "MessageEvent"]
    finally:
        server.stop()
