"""GET and POST /api/conversations/{id}/file: confined to the working directory, capped,
streamed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import create
from tests.support.llm import ScriptedLLM
from tests.support.server import ServerProcess

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

CAP = 256 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """This module's server has a small file cap, so 'too large' stays cheap to test."""
    proc = ServerProcess(
        tmp_path_factory.mktemp("server") / "state", env={"AGENT_SERVER_MAX_FILE_BYTES": str(CAP)}
    ).start()
    yield proc
    proc.stop()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside.txt").write_text("not yours")
    return tmp_path / "ws"


@pytest.fixture
def url(client: httpx.Client, llm: ScriptedLLM, key: str, ws: Path) -> str:
    conv = create(client, llm, key, ws)
    return f"/api/conversations/{conv['id']}/file"


def test_text_binary_and_nested_files_with_content_types(
    client: httpx.Client, url: str, ws: Path
) -> None:
    (ws / "notes.txt").write_text("hello\n")
    blob = bytes(range(256)) * 400
    (ws / "img.png").write_bytes(blob)
    (ws / "sub" / "deep").mkdir(parents=True)
    (ws / "sub" / "deep" / "data.json").write_text('{"a": 1}')
    (ws / "noext").write_bytes(b"\x00\x01")

    r = client.get(url, params={"path": "notes.txt"})
    assert r.status_code == 200 and r.text == "hello\n"
    assert r.headers["content-type"].startswith("text/plain")
    r = client.get(url, params={"path": "img.png"})
    assert r.content == blob and r.headers["content-type"] == "image/png"
    assert r.headers["content-length"] == str(len(blob))
    r = client.get(url, params={"path": str(ws / "sub" / "deep" / "data.json")})  # absolute inside
    assert r.json() == {"a": 1} and r.headers["content-type"] == "application/json"
    r = client.get(url, params={"path": "sub/../noext"})  # `..` that stays inside is fine
    assert r.content == b"\x00\x01" and r.headers["content-type"] == "application/octet-stream"


def test_paths_leaving_the_workspace_are_refused(client: httpx.Client, url: str, ws: Path) -> None:
    outside = ws.parent / "outside.txt"
    (ws / "sub").mkdir()
    (ws / "link.txt").symlink_to(outside)
    (ws / "linkdir").symlink_to(ws.parent)
    (ws / "sub" / "up").symlink_to("../..")
    attempts = [
        "../outside.txt",
        "sub/../../outside.txt",
        str(outside),
        "/etc/passwd",
        "link.txt",
        "linkdir/outside.txt",
        "sub/up/outside.txt",
        "..",
        "/",
    ]
    for path in attempts:
        r = client.get(url, params={"path": path})
        assert r.status_code == 403, (path, r.text)
        assert "outside the working directory" in r.json()["detail"]
    # URL-encoded dots are decoded once, then refused like the plain ones.
    for raw in (
        "%2e%2e%2foutside.txt",
        "%2E%2E/outside.txt",
        "sub%2F%2e%2e%2F%2e%2e%2Foutside.txt",
    ):
        r = client.get(f"{url}?path={raw}")
        assert r.status_code == 403, (raw, r.text)
    # Encoded twice, it is a literal name inside the workspace: not there.
    assert client.get(f"{url}?path=%252e%252e%252foutside.txt").status_code == 404

    for path in ("../evil.txt", str(ws.parent / "evil.txt"), "linkdir/evil.txt", "link.txt"):
        r = client.post(url, params={"path": path}, content=b"x")
        assert r.status_code == 403, (path, r.text)
    assert not (ws.parent / "evil.txt").exists()
    assert outside.read_text() == "not yours"


def test_missing_directory_and_bad_requests(client: httpx.Client, url: str, ws: Path) -> None:
    (ws / "dir").mkdir()
    r = client.get(url, params={"path": "nope.txt"})
    assert r.status_code == 404 and "nope.txt" in r.json()["detail"]
    assert client.get(url, params={"path": "dir/nope/deeper"}).status_code == 404
    r = client.get(url, params={"path": "dir"})
    assert r.status_code == 409 and "directory" in r.json()["detail"]
    assert client.get(url, params={"path": "."}).status_code == 409  # a directory
    r = client.get(url)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "path"]
    assert (
        client.get(
            "/api/conversations/00000000-0000-0000-0000-000000000000/file", params={"path": "x"}
        ).status_code
        == 404
    )
    assert client.get("/api/conversations/not-a-uuid/file", params={"path": "x"}).status_code == 422
    r = httpx.get(client.base_url.join(url), params={"path": "dir"})
    assert r.status_code == 401


def test_size_cap_on_read_and_upload(client: httpx.Client, url: str, ws: Path) -> None:
    (ws / "exact.bin").write_bytes(b"e" * CAP)
    (ws / "big.bin").write_bytes(b"b" * (CAP + 1))
    r = client.get(url, params={"path": "exact.bin"})
    assert r.status_code == 200 and len(r.content) == CAP
    r = client.get(url, params={"path": "big.bin"})
    assert r.status_code == 413 and str(CAP) in r.json()["detail"]

    r = client.post(url, params={"path": "up.bin"}, content=b"u" * (CAP + 1))
    assert r.status_code == 413
    r = client.post(url, params={"path": "up.bin"}, content=_chunks(b"u" * (CAP + 1)))  # no length
    assert r.status_code == 413
    r = client.post(
        url,
        params={"path": "up.bin"},
        files={"file": ("up.bin", b"u" * (CAP + 1), "application/octet-stream")},
    )
    assert r.status_code == 413
    assert sorted(os.listdir(ws)) == ["big.bin", "exact.bin"]  # nothing left behind


def test_upload_then_download_round_trip(client: httpx.Client, url: str, ws: Path) -> None:
    blob = os.urandom(200_000)
    r = client.post(url, params={"path": "new/deeper/blob.bin"}, content=blob)
    assert r.status_code == 200, r.text
    assert r.json() == {"path": "new/deeper/blob.bin", "size": len(blob)}
    assert client.get(url, params={"path": "new/deeper/blob.bin"}).content == blob

    r = client.post(
        url,
        params={"path": str(ws / "form.txt")},
        files={"file": ("ignored-name.txt", b"from a form\n", "text/plain")},
        data={"note": "extra fields are ignored"},
    )
    assert r.status_code == 200 and r.json()["path"] == "form.txt"
    assert (ws / "form.txt").read_bytes() == b"from a form\n"

    script = ws / "run.sh"
    script.write_text("old")
    script.chmod(0o755)
    assert client.post(url, params={"path": "run.sh"}, content=b"#!/bin/sh\n").status_code == 200
    assert script.read_text() == "#!/bin/sh\n" and os.access(script, os.X_OK)  # mode kept

    r = client.post(url, params={"path": "x.txt"}, files={"other": ("a", b"b")})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "file"]
    assert client.post(url, params={"path": "new"}, content=b"x").status_code == 409
    r = client.post(url, params={"path": "form.txt/child"}, content=b"x")
    assert r.status_code == 409 and "not a directory" in r.json()["detail"]
    assert client.post(url, params={"path": "empty.txt"}, content=b"").json()["size"] == 0


def _chunks(data: bytes) -> Iterator[bytes]:
    for i in range(0, len(data), 65536):
        yield data[i : i + 65536]
