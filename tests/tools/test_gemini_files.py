"""list_directory, read_file, write_file and edit on real files: what the model reads, what
lands on disk, and that no path (symlinks included) leads out of the workspace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from events.tools.base import Observation
from events.tools.gemini import (
    EditObservation,
    ListDirectoryObservation,
    ReadFileObservation,
    WriteFileObservation,
)
from tests.support.tools import call as call_tool
from tests.support.tools import context
from tools.base import Tool
from tools.gemini.edit import EditTool
from tools.gemini.list_directory import MAX_ENTRIES, ListDirectoryTool
from tools.gemini.read_file import MAX_LINES_PER_READ, ReadFileTool
from tools.gemini.write_file import WriteFileTool


@pytest.fixture
def outside(tmp_path: Path, workspace: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("secret\n")
    (workspace / "link").symlink_to(path)
    (workspace / "file_link.txt").symlink_to(path / "secret.txt")
    return path


async def call(tool: type[Tool], workspace: Path, **arguments: Any) -> Any:
    return await call_tool(tool(context(workspace)), **arguments)


# -- read_file ---------------------------------------------------------------------------------


async def test_read_whole_and_in_windows(workspace: Path) -> None:
    (workspace / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 2501)))
    whole: ReadFileObservation = await call(ReadFileTool, workspace, file_path="a.txt")
    assert whole.is_truncated and whole.total_lines == 2500
    assert whole.lines_shown == (1, MAX_LINES_PER_READ)
    assert whole.file_content.startswith("line 1\n") and "line 1001" not in whole.file_content
    assert "offset=1000" in whole.text and "     1\tline 1" in whole.text
    window = await call(
        ReadFileTool, workspace, file_path=str(workspace / "a.txt"), offset=2490, limit=50
    )
    assert window.lines_shown == (2491, 2500) and window.file_content.endswith("line 2500\n")
    beyond = await call(ReadFileTool, workspace, file_path="a.txt", offset=9999)
    assert beyond.is_error and "beyond the end" in beyond.text


async def test_read_refusals(workspace: Path, outside: Path) -> None:
    (workspace / "bin").write_bytes(b"\0\1\2")
    for path, said in [
        ("missing.txt", "does not exist"),
        ("bin", "binary"),
        (".", "is a directory"),
        ("../outside/secret.txt", "outside the workspace"),
        ("link/secret.txt", "outside the workspace"),
        ("file_link.txt", "outside the workspace"),
        ("/etc/passwd", "outside"),
    ]:
        obs = await call(ReadFileTool, workspace, file_path=path)
        assert obs.is_error and said in obs.text, (path, obs.text)
        assert "secret" not in obs.file_content


# -- write_file --------------------------------------------------------------------------------


async def test_write_creates_and_replaces(workspace: Path) -> None:
    new: WriteFileObservation = await call(
        WriteFileTool, workspace, file_path="pkg/m.py", content="x = 1\n"
    )
    assert not new.is_error and new.is_new_file and new.new_content == "x = 1\n"
    assert (workspace / "pkg/m.py").read_text() == "x = 1\n"
    (workspace / "pkg/m.py").chmod(0o755)
    again = await call(WriteFileTool, workspace, file_path="pkg/m.py", content="x = 2\n")
    assert not again.is_new_file and again.old_content == "x = 1\n"
    assert (workspace / "pkg/m.py").read_text() == "x = 2\n"
    assert (workspace / "pkg/m.py").stat().st_mode & 0o777 == 0o755
    assert [p.name for p in (workspace / "pkg").iterdir()] == ["m.py"]  # no temp file left


async def test_write_never_leaves_the_workspace(workspace: Path, outside: Path) -> None:
    for path in ["../escape.txt", "link/new.txt", "file_link.txt", "/tmp/x.txt"]:
        obs = await call(WriteFileTool, workspace, file_path=path, content="pwned")
        assert obs.is_error and "outside the workspace" in obs.text, (path, obs.text)
    assert (outside / "secret.txt").read_text() == "secret\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert not (workspace.parent / "escape.txt").exists()


# -- edit --------------------------------------------------------------------------------------


async def test_edit_replaces_the_expected_count(workspace: Path) -> None:
    target = workspace / "e.py"
    target.write_text("a = 1\nb = 1\nc = 2\n")
    obs: EditObservation = await call(
        EditTool, workspace, file_path="e.py", old_string="c = 2", new_string="c = 3"
    )
    assert not obs.is_error and obs.replacements_made == 1 and "     3\tc = 3" in obs.text
    assert obs.old_content == "a = 1\nb = 1\nc = 2\n" and obs.new_content == target.read_text()
    wrong = await call(EditTool, workspace, file_path="e.py", old_string="= 1", new_string="= 9")
    assert wrong.is_error and "expected 1 occurrence" in wrong.text and "found 2" in wrong.text
    both = await call(
        EditTool,
        workspace,
        file_path="e.py",
        old_string="= 1",
        new_string="= 9",
        expected_replacements=2,
    )
    assert both.replacements_made == 2 and target.read_text() == "a = 9\nb = 9\nc = 3\n"
    missing = await call(EditTool, workspace, file_path="e.py", old_string="zzz", new_string="y")
    assert missing.is_error and "not found" in missing.text
    same = await call(EditTool, workspace, file_path="e.py", old_string="a", new_string="a")
    assert same.is_error and "same" in same.text


async def test_edit_with_empty_old_string_creates(workspace: Path, outside: Path) -> None:
    obs = await call(EditTool, workspace, file_path="new/f.txt", old_string="", new_string="hi\n")
    assert obs.is_new_file and (workspace / "new/f.txt").read_text() == "hi\n"
    again = await call(EditTool, workspace, file_path="new/f.txt", old_string="", new_string="x")
    assert again.is_error and "already exists" in again.text
    escape = await call(
        EditTool, workspace, file_path="link/secret.txt", old_string="secret", new_string="pwned"
    )
    assert escape.is_error and (outside / "secret.txt").read_text() == "secret\n"


async def test_edit_keeps_crlf(workspace: Path) -> None:
    (workspace / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    obs = await call(
        EditTool, workspace, file_path="w.txt", old_string="one\ntwo", new_string="one\nTWO"
    )
    assert not obs.is_error and (workspace / "w.txt").read_bytes() == b"one\r\nTWO\r\n"


# -- list_directory ----------------------------------------------------------------------------


async def test_list_directory(workspace: Path, outside: Path) -> None:
    (workspace / "src/deep/deeper").mkdir(parents=True)
    (workspace / "src/app.py").write_text("print()\n")
    (workspace / "src/deep/deeper/x.txt").write_text("x")
    (workspace / ".env").write_text("A=1")
    flat: ListDirectoryObservation = await call(ListDirectoryTool, workspace)
    names = [e.name for e in flat.entries]
    assert names == ["src", ".env", "file_link.txt", "link"]
    assert flat.total_count == 4 and not flat.is_truncated
    assert flat.entries[3].is_directory is False  # a symlink is shown, never entered
    assert all(e.modified_time.tzinfo is not None for e in flat.entries)
    deep = await call(ListDirectoryTool, workspace, dir_path="src", recursive=True)
    assert sorted(e.name for e in deep.entries) == ["app.py", "deep", "deeper"]
    app = next(e for e in deep.entries if e.name == "app.py")
    assert app.size == 8 and app.path == str(workspace / "src/app.py")
    for bad in ["link", "../outside", "src/app.py", "nope"]:
        obs = await call(ListDirectoryTool, workspace, dir_path=bad)
        assert obs.is_error and obs.entries == [], bad


async def test_list_directory_caps(workspace: Path) -> None:
    for i in range(MAX_ENTRIES + 20):
        (workspace / f"f{i:04}").write_text("")
    obs = await call(ListDirectoryTool, workspace)
    assert len(obs.entries) == MAX_ENTRIES and obs.total_count == MAX_ENTRIES + 20
    assert obs.is_truncated and "[20 more entries not shown" in obs.text


def test_params_are_described() -> None:
    for tool in (ReadFileTool, WriteFileTool, EditTool, ListDirectoryTool):
        for name, spec in tool.parameters()["properties"].items():
            assert spec.get("description"), (tool.name, name)
    assert issubclass(ReadFileTool.observation_type, Observation)
