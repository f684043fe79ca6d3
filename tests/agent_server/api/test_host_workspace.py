"""The OpenHands-named workspace routes, for the host (/api/bash, /api/file, /api/git) and per
conversation: the same confinement, limits and masking as the per-conversation routes."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import create
from tests.support.llm import ScriptedLLM

SECRET = "host-s3cr3t-value-777"


def finished(client: httpx.Client, prefix: str, command: str, **extra: Any) -> dict[str, Any]:
    """Start a background command and poll for its BashOutput pieces, as the OpenHands SDK
    does: the last one (with the exit code), its stdout and stderr those of all joined."""
    r = client.post(f"{prefix}/bash/start_bash_command", json={"command": command, **extra})
    assert r.status_code == 200, r.text
    started = r.json()
    assert started["kind"] == "BashCommand" and started["id"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = client.get(
            f"{prefix}/bash/bash_events/search",
            params={
                "kind__eq": "BashOutput",
                "command_id__eq": started["id"],
                "sort_order": "TIMESTAMP",
                "limit": 100,
                "order__gt": -1,
            },
        )
        assert r.status_code == 200, r.text
        items = r.json()["items"]
        done = [i for i in items if i["exit_code"] is not None]
        if done:
            ordered = sorted(items, key=lambda i: i["order"])
            assert [i["order"] for i in ordered] == list(range(len(ordered)))
            # Pieces are cut by time: a loaded machine may split even a short command's output.
            assert done == [ordered[-1]], "only the last piece carries the exit code"
            return {
                **done[0],
                "pieces": len(ordered),
                "stdout": "".join(i["stdout"] or "" for i in ordered),
                "stderr": "".join(i["stderr"] or "" for i in ordered),
            }
        time.sleep(0.05)
    raise AssertionError("the command did not finish")


def test_host_and_conversation_scopes_share_one_implementation(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    repo = ws / "repo"
    repo.mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    (repo / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=repo, check=True)
    (repo / "a.txt").write_text("two\n")
    cid = create(client, llm, key, ws)["id"]
    assert (
        client.post(
            f"/api/conversations/{cid}/secrets", json={"secrets": {"MY_TOKEN": SECRET}}
        ).status_code
        == 200
    )

    for prefix in ("/api", f"/api/conversations/{cid}"):
        out = finished(client, prefix, "pwd; echo out; echo err >&2; exit 3", cwd=str(repo))
        assert out["exit_code"] == 3 and out["order"] == out["pieces"] - 1
        assert out["stdout"] == f"{repo}\nout\n" and out["stderr"] == "err\n"
        r = client.post(f"{prefix}/bash/execute_bash_command", json={"command": "echo now"})
        assert r.status_code == 200 and r.json()["stdout"] == "now\n", r.text

        r = client.post(
            f"{prefix}/file/upload",
            params={"path": str(ws / "up" / "f.bin")},
            files={"file": ("f.bin", b"\x00bytes")},
        )
        assert r.status_code == 200, r.text
        assert r.json() == {"success": True, "path": str(ws / "up" / "f.bin"), "file_size": 6}
        r = client.get(f"{prefix}/file/download", params={"path": str(ws / "up" / "f.bin")})
        assert r.status_code == 200 and r.content == b"\x00bytes"

        r = client.get(f"{prefix}/git/changes", params={"path": str(repo)})
        assert r.status_code == 200 and r.json() == [
            {"path": "a.txt", "status": "UPDATED", "old_path": None}
        ], r.text
        r = client.get(f"{prefix}/git/diff", params={"path": str(repo / "a.txt")})
        assert r.status_code == 200 and (r.json()["original"], r.json()["modified"]) == (
            "one\n",
            "two\n",
        )

        r = client.get(f"{prefix}/files", params={"path": str(repo)})
        assert r.status_code == 200 and "a.txt" in [e["name"] for e in r.json()["entries"]]

        # Confined: nothing outside the working directories, whichever route.
        for path in ("/etc", "..", str(tmp_path)):
            assert client.get(f"{prefix}/files", params={"path": path}).status_code == 403, path
        outside = str(tmp_path / "elsewhere.txt")
        assert (
            client.get(f"{prefix}/file/download", params={"path": "/etc/passwd"}).status_code == 403
        )
        assert (
            client.post(
                f"{prefix}/file/upload", params={"path": outside}, files={"file": ("x", b"x")}
            ).status_code
            == 403
        )
        assert (
            client.post(
                f"{prefix}/bash/start_bash_command", json={"command": "true", "cwd": "/"}
            ).status_code
            == 403
        )
        assert client.get(f"{prefix}/git/changes", params={"path": "/"}).status_code == 403
        assert not Path(outside).exists()

    # The conversation's secret is in its commands' environment and masked in their output;
    # the host's commands get the settings' secrets, not a conversation's.
    out = finished(client, f"/api/conversations/{cid}", "echo $MY_TOKEN")
    assert SECRET not in out["stdout"] and "<secret-hidden>" in out["stdout"]
    assert finished(client, "/api", 'echo "[$MY_TOKEN]"')["stdout"] == "[]\n"
    # The two scopes keep their commands apart.
    host = client.get("/api/bash/bash_events/search").json()["items"]
    scoped = client.get(f"/api/conversations/{cid}/bash/bash_events/search").json()["items"]
    assert not {i["id"] for i in host} & {i["id"] for i in scoped}


def test_a_background_command_stops_and_unknown_ones_are_404(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    create(client, llm, key, tmp_path)
    r = client.post(
        "/api/bash/start_bash_command", json={"command": "sleep 30", "cwd": str(tmp_path)}
    )
    command = r.json()
    started = time.monotonic()
    r = client.post(f"/api/bash/bash_commands/{command['id']}/stop")
    assert r.status_code == 200 and time.monotonic() - started < 10
    [out] = client.get(
        "/api/bash/bash_events/search",
        params={"command_id__eq": command["id"], "kind__eq": "BashOutput"},
    ).json()["items"]
    assert out["exit_code"] not in (None, 0)
    assert client.post("/api/bash/bash_commands/nope/stop").status_code == 404
