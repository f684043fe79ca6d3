"""GET .../download (the trajectory zip) and PATCH /api/conversations/{id} (title and tags)."""

from __future__ import annotations

import io
import json
import uuid
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest import create
from tests.support.api import events, wait_status
from tests.support.llm import ScriptedLLM, call
from tests.support.server import ServerProcess

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

SECRET = "export-secret-9876"


def test_download_of_a_finished_conversation(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, call("think", thought="planning"), call("finish", message="all done"))
    conv = create(
        client,
        llm,
        key,
        tmp_path,
        message=f"the token is {SECRET}",
        run=True,
        secrets={"TOKEN": SECRET},
        title="export me",
    )
    assert wait_status(client, conv["id"]) == "finished"

    with client.stream("GET", f"/api/conversations/{conv['id']}/download") as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/zip"
        assert f"conversation-{conv['id']}.zip" in r.headers["content-disposition"]
        assert "content-length" not in r.headers  # streamed, not built whole first
        data = r.read()
    archive = zipfile.ZipFile(io.BytesIO(data))
    assert archive.testzip() is None
    assert archive.namelist() == ["meta.json", "events.jsonl"]

    lines = archive.read("events.jsonl").decode().splitlines()
    assert [json.loads(line) for line in lines] == events(client, conv["id"])
    meta = json.loads(archive.read("meta.json"))
    assert meta["id"] == conv["id"] and meta["execution_status"] == "finished"
    assert meta["title"] == "export me" and meta["secret_names"] == ["TOKEN"]
    assert meta["agent"]["llm"]["api_key"] == "**********"
    everything = b"".join(archive.read(n) for n in archive.namelist())
    assert SECRET.encode() not in everything and b"sk-test-key" not in everything
    assert b"<secret-hidden>" in everything  # the message, as stored

    assert client.get(f"/api/conversations/{uuid.uuid4()}/download").status_code == 404


def test_download_of_a_long_conversation(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    conv = create(client, llm, key, tmp_path)

    def send(i: int) -> None:
        r = client.post(
            f"/api/conversations/{conv['id']}/events",
            json={"content": [{"type": "text", "text": f"message {i} " + "x" * 200}]},
        )
        assert r.status_code == 200

    with ThreadPoolExecutor(8) as pool:  # concurrent appends share their fsyncs
        list(pool.map(send, range(700)))  # more than one batch of log reads
    data = client.get(f"/api/conversations/{conv['id']}/download").content
    lines = zipfile.ZipFile(io.BytesIO(data)).read("events.jsonl").splitlines()
    assert len(lines) == 701
    assert [json.loads(line) for line in lines] == events(client, conv["id"])
    assert len(data) < 60_000  # compressed


def test_patch_title_and_tags(
    client: httpx.Client, server: ServerProcess, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    conv = create(client, llm, key, tmp_path, title="first")
    url = f"/api/conversations/{conv['id']}"
    r = client.patch(
        url,
        json={
            "title": "Renamed",
            "tags": {"team": "core", "ticket-id": "T_1"},
            "unknown": "ignored",
        },
    )
    assert r.status_code == 200, r.text
    info = r.json()
    assert info["title"] == "Renamed" and info["tags"] == {"team": "core", "ticket-id": "T_1"}
    assert info["updated_at"] > conv["updated_at"]
    assert client.get(url).json()["tags"] == info["tags"]
    stored = json.loads(
        (server.state_dir / "conversations" / uuid.UUID(conv["id"]).hex / "meta.json").read_text()
    )
    assert stored["title"] == "Renamed" and stored["tags"] == info["tags"]

    assert client.patch(url, json={"tags": {"only": "this"}}).json()["tags"] == {"only": "this"}
    assert client.patch(url, json={}).json()["title"] == "Renamed"  # left out: kept
    assert client.patch(url, json={"title": None}).json()["title"] is None

    refused = [
        ({"title": ""}, ["body", "title"]),
        ({"title": "   "}, ["body", "title"]),
        ({"title": "x" * 201}, ["body", "title"]),
        ({"tags": {"Upper": "v"}}, ["body", "tags"]),
        ({"tags": {"k" * 51: "v"}}, ["body", "tags"]),
        ({"tags": {"a b": "v"}}, ["body", "tags"]),
        ({"tags": {"k": "v" * 257}}, ["body", "tags"]),
        ({"tags": {f"k{i}": "v" for i in range(51)}}, ["body", "tags"]),
        ({"tags": {"k": 1}}, ["body", "tags", "k"]),
    ]
    for body, loc in refused:
        r = client.patch(url, json=body)
        assert r.status_code == 422, (body, r.text)
        # Where inside it, exactly (a key, a value) is pydantic's to say.
        assert r.json()["detail"][0]["loc"][: len(loc)] == loc, body
    assert client.get(url).json()["tags"] == {"only": "this"}
    assert client.patch(url, content=b"not json").status_code == 422
    assert (
        client.patch(f"/api/conversations/{uuid.uuid4()}", json={"title": "x"}).status_code == 404
    )
