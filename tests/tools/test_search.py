"""glob and grep on real trees, with ripgrep and with the Python fallback: caps and the
count of what was left out, .gitignore, hidden files, and paths that would leave the
workspace."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from events.tools.search import GlobObservation, GrepObservation
from tests.support.tools import call, context
from tools.search import GlobTool, GrepTool, walk
from tools.search.ignore import ParsedIgnorer
from tools.search.patterns import matches

HAS_RG = shutil.which("rg") is not None


@pytest.fixture(params=["rg", "python"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "rg" and not HAS_RG:
        pytest.skip("ripgrep is not installed")
    if request.param == "python":
        monkeypatch.setattr(walk, "ripgrep", lambda: None)
    return str(request.param)


async def grep(workspace: Path, **arguments: Any) -> GrepObservation:
    obs: GrepObservation = await call(GrepTool(context(workspace)), **arguments)
    return obs


async def glob(workspace: Path, **arguments: Any) -> GlobObservation:
    obs: GlobObservation = await call(GlobTool(context(workspace)), **arguments)
    return obs


def tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def git_init(root: Path) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)


# -- grep --------------------------------------------------------------------------------------


async def test_grep_lists_files_and_lines(backend: str, tmp_path: Path, workspace: Path) -> None:
    tree(
        workspace,
        {
            "src/app.py": "import os\ndef main():\n    log_error('x')\n",
            "src/util.js": "function log_error() {}\n",
            "README.md": "nothing\n",
        },
    )
    obs = await grep(workspace, pattern=r"log_\w+")
    assert not obs.is_error, obs.text
    assert sorted(obs.matches) == [str(workspace / "src/app.py"), str(workspace / "src/util.js")]
    assert "  3:     log_error('x')" in obs.text and "  1: function log_error() {}" in obs.text
    assert obs.search_path == str(workspace) and not obs.truncated
    only_py = await grep(workspace, pattern="log_", include="*.py")
    assert only_py.matches == [str(workspace / "src/app.py")]
    inside = await grep(workspace, pattern="log_", path="src")
    assert len(inside.matches) == 2
    none = await grep(workspace, pattern="absent_word")
    assert none.matches == [] and "No matches" in none.text and not none.is_error


async def test_grep_caps_files_and_counts_the_rest(
    backend: str, tmp_path: Path, workspace: Path
) -> None:
    tree(workspace, {f"d{i % 7}/f{i}.txt": "needle\n" * 15 for i in range(130)})
    obs = await grep(workspace, pattern="needle")
    assert len(obs.matches) == 100 and obs.truncated
    assert "130 files match" in obs.text and "[30 more files not shown" in obs.text
    assert obs.text.count("more matches in this file not shown") == 100
    assert obs.text.count(": needle") == 1000


async def test_grep_newest_first(backend: str, tmp_path: Path, workspace: Path) -> None:
    tree(workspace, {"old.txt": "x\n", "new.txt": "x\n"})
    os.utime(workspace / "old.txt", (1_000_000, 1_000_000))
    obs = await grep(workspace, pattern="x")
    assert obs.matches == [str(workspace / "new.txt"), str(workspace / "old.txt")]


@pytest.mark.parametrize("in_git", [True, False])
async def test_gitignore_hidden_and_binary_are_left_out(
    backend: str, in_git: bool, tmp_path: Path, workspace: Path
) -> None:
    if in_git:
        git_init(workspace)
    tree(
        workspace,
        {
            ".gitignore": "build/\n*.log\n!keep.log\n/top.txt\n",
            "src/a.py": "token\n",
            "build/out.py": "token\n",
            "src/build/deep.py": "token\n",
            "debug.log": "token\n",
            "keep.log": "token\n",
            "top.txt": "token\n",
            "sub/top.txt": "token\n",
            ".hidden/h.py": "token\n",
            "sub/.gitignore": "ignored_here.py\n",
            "sub/ignored_here.py": "token\n",
        },
    )
    (workspace / "bin.dat").write_bytes(b"token\0\x01")
    obs = await grep(workspace, pattern="token")
    found = sorted(os.path.relpath(m, workspace) for m in obs.matches)
    assert found == ["keep.log", "src/a.py", "sub/top.txt"]
    listed = await glob(workspace, pattern="**/*.py")
    assert sorted(os.path.relpath(m, workspace) for m in listed.files) == ["src/a.py"]


async def test_grep_bad_regex_is_an_error_the_model_reads(
    backend: str, tmp_path: Path, workspace: Path
) -> None:
    tree(workspace, {"a.txt": "x\n"})
    obs = await grep(workspace, pattern="(unclosed")
    assert obs.is_error and "could not search" in obs.text


@pytest.mark.parametrize("path", ["..", "/etc", "link", "missing", "a.txt"])
async def test_search_paths_stay_in_the_workspace(
    backend: str, path: str, tmp_path: Path, workspace: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("token\n")
    (workspace / "link").symlink_to(outside)
    (workspace / "a.txt").write_text("token\n")
    obs = await grep(workspace, pattern="token", path=path)
    assert obs.is_error and obs.matches == []
    assert "outside the workspace" in obs.text or "directory" in obs.text
    listed = await glob(workspace, pattern="**/*", path=path)
    assert listed.is_error and listed.files == []


async def test_symlinks_inside_are_not_followed(
    backend: str, tmp_path: Path, workspace: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("token\n")
    (workspace / "link").symlink_to(outside)
    (workspace / "file_link.txt").symlink_to(outside / "secret.txt")
    obs = await grep(workspace, pattern="token")
    assert obs.matches == [] and not obs.is_error


# -- glob --------------------------------------------------------------------------------------


async def test_glob_patterns(backend: str, tmp_path: Path, workspace: Path) -> None:
    tree(
        workspace,
        {"a.py": "", "src/b.py": "", "src/deep/c.ts": "", "src/d.json": "", "lib/e.yaml": ""},
    )

    async def names(pattern: str, **kw: Any) -> list[str]:
        obs = await glob(workspace, pattern=pattern, **kw)
        assert not obs.is_error, obs.text
        return sorted(os.path.relpath(f, workspace) for f in obs.files)

    assert await names("*.py") == ["a.py", "src/b.py"]
    assert await names("**/*.py") == ["a.py", "src/b.py"]
    assert await names("src/**/*.ts") == ["src/deep/c.ts"]
    assert await names("*.{json,yaml}") == ["lib/e.yaml", "src/d.json"]
    assert await names("*.py", path="src") == ["src/b.py"]
    assert await names(f"{workspace}/src/*.py") == ["src/b.py"]


async def test_glob_caps_and_counts(backend: str, tmp_path: Path, workspace: Path) -> None:
    tree(workspace, {f"f{i}.txt": "" for i in range(150)})
    obs = await glob(workspace, pattern="*.txt")
    assert len(obs.files) == 100 and obs.truncated
    assert "150 files match" in obs.text and "[50 more files not shown" in obs.text


# -- the pieces ------------------------------------------------------------------------------


def test_parsed_gitignore_rules(tmp_path: Path) -> None:
    tree(tmp_path, {".gitignore": "# comment\n*.pyc\nout/\n!important.pyc\n/root_only\n"})
    ignorer = ParsedIgnorer(tmp_path)
    paths = [
        ("a.pyc", False),
        ("x/b.pyc", False),
        ("important.pyc", False),
        ("out", True),
        ("out", False),
        ("x/out", True),
        ("root_only", False),
        ("x/root_only", False),
    ]
    assert ignorer.ignored(paths) == {"a.pyc", "x/b.pyc", "out", "x/out", "root_only"}


def test_glob_translation() -> None:
    assert matches("**/test_*.py", "tests/unit/test_a.py") and matches("**/test_*.py", "test_b.py")
    assert not matches("src/*.py", "src/a/b.py") and matches("src/**", "src/a/b.py")
    assert matches("[!a]*.txt", "b.txt") and not matches("[!a]*.txt", "a.txt")
