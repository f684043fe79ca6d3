"""GET .../git/changes and .../git/diff: the workspace's changes against HEAD."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import create
from tests.support.llm import ScriptedLLM

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

AUTHOR = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **AUTHOR, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout


def make_repo(repo: Path) -> None:
    """Committed a, b, old, keep; then a modified, b deleted, old renamed (git mv), one file
    staged as new and one left untracked."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    for name in ("a.txt", "b.txt", "old.txt", "keep.txt"):
        (repo / name).write_text(f"{name} line 1\nline 2\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    (repo / "a.txt").write_text("a.txt line 1\nline 2 changed\n")
    (repo / "b.txt").unlink()
    git(repo, "mv", "old.txt", "new.txt")
    (repo / "staged.txt").write_text("staged\n")
    git(repo, "add", "staged.txt")
    (repo / "dir").mkdir()
    (repo / "dir" / "untracked.txt").write_text("untracked\n")
    (repo / ".gitignore").write_text("ignored.log\n")
    (repo / "ignored.log").write_text("noise\n")


def expected(prefix: str = "") -> list[dict[str, str | None]]:
    items = [
        {"path": ".gitignore", "status": "ADDED", "old_path": None},
        {"path": "a.txt", "status": "UPDATED", "old_path": None},
        {"path": "b.txt", "status": "DELETED", "old_path": None},
        {"path": "dir/untracked.txt", "status": "ADDED", "old_path": None},
        {"path": "new.txt", "status": "MOVED", "old_path": "old.txt"},
        {"path": "staged.txt", "status": "ADDED", "old_path": None},
    ]
    for item in items:
        item["path"] = prefix + str(item["path"])
        if item["old_path"]:
            item["old_path"] = prefix + str(item["old_path"])
    return items


def conv_url(client: httpx.Client, llm: ScriptedLLM, key: str, ws: Path) -> str:
    return f"/api/conversations/{create(client, llm, key, ws)['id']}"


def test_changes_of_a_repository_workspace(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    make_repo(tmp_path)
    url = conv_url(client, llm, key, tmp_path)
    r = client.get(url + "/git/changes")
    assert r.status_code == 200 and "x-detail" not in r.headers
    assert r.json() == expected()
    assert git(tmp_path, "status", "--porcelain")  # still dirty: nothing was committed or reset


def test_diff_of_one_file_and_of_everything(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    make_repo(tmp_path)
    url = conv_url(client, llm, key, tmp_path)
    diff = lambda path: client.get(url + "/git/diff", params={"path": path})  # noqa: E731
    assert diff("a.txt").json() == {
        "path": "a.txt",
        "original": "a.txt line 1\nline 2\n",
        "modified": "a.txt line 1\nline 2 changed\n",
    }
    assert diff("b.txt").json() == {
        "path": "b.txt",
        "original": "b.txt line 1\nline 2\n",
        "modified": None,
    }
    assert diff("new.txt").json()["original"] == "old.txt line 1\nline 2\n"  # from its old path
    assert diff(str(tmp_path / "dir" / "untracked.txt")).json() == {
        "path": "dir/untracked.txt",
        "original": None,
        "modified": "untracked\n",
    }
    assert diff("keep.txt").json()["original"] == diff("keep.txt").json()["modified"]
    assert diff("nothing.txt").status_code == 404
    assert diff("dir").status_code == 409
    assert diff("../elsewhere").status_code == 403

    r = client.get(url + "/git/diff")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert "diff --git a/a.txt b/a.txt" in text and "+line 2 changed" in text
    assert "deleted file mode" in text and "rename from old.txt" in text
    assert "+++ b/dir/untracked.txt" in text and "+untracked" in text
    assert "+noise" not in text  # ignored files stay out


def test_repositories_in_subdirectories(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    make_repo(tmp_path / "projects" / "app")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q")
    (fresh / "first.txt").write_text("before any commit\n")
    (tmp_path / "loose.txt").write_text("not in a repository\n")
    url = conv_url(client, llm, key, tmp_path)

    items = client.get(url + "/git/changes").json()
    assert [i for i in items if i["path"].startswith("projects/")] == expected("projects/app/")
    assert [i for i in items if i["path"].startswith("fresh/")] == [
        {"path": "fresh/first.txt", "status": "ADDED", "old_path": None}
    ]
    assert not any(i["path"] == "loose.txt" for i in items)

    r = client.get(url + "/git/diff", params={"path": "projects/app/a.txt"})
    assert r.json()["path"] == "projects/app/a.txt" and r.json()["modified"].endswith("changed\n")
    assert client.get(url + "/git/diff", params={"path": "loose.txt"}).status_code == 404
    text = client.get(url + "/git/diff").text
    assert "diff --git a/projects/app/a.txt b/projects/app/a.txt" in text
    assert "+++ b/fresh/first.txt" in text


def test_changes_of_a_directory_below_a_repositorys_root(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    """Issue 30.7: a path inside a repository (not at its top) found no repository below it and
    answered []. Now it answers that repository's changes under the path, relative to it; a
    repository above the working directory stays out."""
    make_repo(tmp_path / "app")
    (tmp_path / "app" / "dir" / "more.txt").write_text("more\n")
    url = conv_url(client, llm, key, tmp_path)
    r = client.get(url + "/git/changes", params={"path": "app/dir"})
    assert r.status_code == 200 and "x-detail" not in r.headers, r.text
    assert r.json() == [
        {"path": "more.txt", "status": "ADDED", "old_path": None},
        {"path": "untracked.txt", "status": "ADDED", "old_path": None},
    ]
    whole = client.get(url + "/git/changes", params={"path": str(tmp_path / "app")}).json()
    assert whole == sorted(
        expected() + [{"path": "dir/more.txt", "status": "ADDED", "old_path": None}],
        key=lambda i: str(i["path"]),
    )
    # A working directory inside a repository is not that repository's top: it stays out.
    inner = conv_url(client, llm, key, tmp_path / "app" / "dir")
    r = client.get(inner + "/git/changes")
    assert r.json() == [] and "no Git repository" in r.headers["x-detail"]


def test_a_workspace_without_git(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    (tmp_path / "plain.txt").write_text("x")
    url = conv_url(client, llm, key, tmp_path)
    r = client.get(url + "/git/changes")
    assert r.status_code == 200 and r.json() == []
    assert "no Git repository" in r.headers["x-detail"]
    r = client.get(url + "/git/diff")
    assert r.status_code == 200 and r.text == "" and "no Git repository" in r.headers["x-detail"]
    r = client.get(url + "/git/diff", params={"path": "plain.txt"})
    assert r.status_code == 404 and "no Git repository" in r.json()["detail"]
    assert (
        client.get(
            "/api/conversations/00000000-0000-0000-0000-000000000000/git/changes"
        ).status_code
        == 404
    )


def test_reading_changes_never_runs_a_repository_filter(client, llm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    from tests.conftest import create

    ws = tmp_path / "ws"
    ws.mkdir()
    marker = tmp_path / "FILTER_RAN"

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=ws,
            check=True,
            capture_output=True,
        )

    git("init", "-q", ".")
    (ws / "a.txt").write_text("a\n")
    git("add", "a.txt")
    git("commit", "-qm", "one")
    (ws / ".gitattributes").write_text("*.txt filter=evil\n")
    git("config", "filter.evil.clean", f"touch {marker}; cat")
    git("config", "filter.evil.process", f"touch {marker}; false")
    (ws / "a.txt").write_text("a\nb\n")
    (ws / "broken").mkdir()
    (ws / "broken" / ".git").mkdir()  # not a repository: must not spoil the answer
    conv = create(client, llm, "gitfilter", ws)
    r = client.get(f"/api/conversations/{conv['id']}/git/changes")
    assert r.status_code == 200, r.text
    assert {"path": "a.txt", "status": "UPDATED"} in [
        {k: c[k] for k in ("path", "status")} for c in r.json()
    ]
    r = client.get(f"/api/conversations/{conv['id']}/git/diff")
    assert r.status_code == 200 and "+b" in r.text
    assert not marker.exists()
