"""file_editor against real files in a temporary workspace: what the model reads, what lands
on disk, and that every refusal leaves the file as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tools import call, context
from tools.file_editor import (
    HISTORY_DEPTH,
    FileEditorTool,
)
from tools.files import MAX_FILE_BYTES, MAX_OUTPUT_CHARS


@pytest.fixture
def editor(workspace: Path) -> FileEditorTool:
    return FileEditorTool(context(workspace))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))
    return path


def read(path: Path) -> str:
    return path.read_bytes().decode("utf-8")


# -- paths and schema ----------------------------------------------------------------------


async def test_relative_path_is_refused_with_the_absolute_suggestion(
    editor: FileEditorTool, workspace: Path
) -> None:
    obs = await call(editor, command="view", path="src/app.py")
    assert obs.is_error
    assert "not an absolute path" in obs.text
    assert str(workspace / "src" / "app.py") in obs.text


def test_every_argument_is_described_for_the_model() -> None:
    properties = FileEditorTool.parameters()["properties"]
    for name in ("command", "path", "file_text", "old_str", "new_str", "insert_line"):
        assert properties[name].get("description"), name
    assert properties["view_range"].get("description")
    assert FileEditorTool.parameters()["required"] == ["command", "path"]


# -- create ----------------------------------------------------------------------------------


async def test_create_writes_the_file_and_its_parent_directories(
    editor: FileEditorTool, workspace: Path
) -> None:
    target = workspace / "pkg" / "sub" / "mod.py"
    obs = await call(editor, command="create", path=str(target), file_text="x = 1\n")
    assert not obs.is_error
    assert read(target) == "x = 1\n"
    assert obs.prev_exist is False
    assert obs.new_content == "x = 1\n" and obs.old_content is None
    assert str(target) in obs.text


async def test_create_refuses_an_existing_file(editor: FileEditorTool, workspace: Path) -> None:
    target = write(workspace / "a.txt", "keep me\n")
    obs = await call(editor, command="create", path=str(target), file_text="new\n")
    assert obs.is_error
    assert "already exists" in obs.text and "str_replace" in obs.text and "delete" in obs.text
    assert read(target) == "keep me\n"


async def test_create_needs_file_text(editor: FileEditorTool, workspace: Path) -> None:
    obs = await call(editor, command="create", path=str(workspace / "a.txt"))
    assert obs.is_error and "file_text" in obs.text
    assert not (workspace / "a.txt").exists()


# -- view --------------------------------------------------------------------------------------


async def test_view_numbers_lines_like_cat_n(editor: FileEditorTool, workspace: Path) -> None:
    target = write(workspace / "f.txt", "alpha\nbeta\ngamma\n")
    obs = await call(editor, command="view", path=str(target))
    assert not obs.is_error
    assert "     1\talpha\n     2\tbeta\n     3\tgamma" in obs.text
    assert "     4\t" not in obs.text


async def test_view_range_shows_only_the_asked_lines(
    editor: FileEditorTool, workspace: Path
) -> None:
    target = write(workspace / "f.txt", "".join(f"line {n}\n" for n in range(1, 11)))
    middle = await call(editor, command="view", path=str(target), view_range=[3, 4])
    assert "     3\tline 3\n     4\tline 4" in middle.text
    assert "line 2" not in middle.text and "line 5" not in middle.text
    tail = await call(editor, command="view", path=str(target), view_range=[9, -1])
    assert "     9\tline 9\n    10\tline 10" in tail.text and "line 8" not in tail.text


@pytest.mark.parametrize(
    ("view_range", "expected"),
    [
        ([0, 3], "numbered from 1"),
        ([5, 2], "end 2 is before start 5"),
        ([11, -1], "beyond the end of the file, which has 10 lines"),
        ([1], "two numbers"),
    ],
)
async def test_bad_view_range_is_explained(
    editor: FileEditorTool, workspace: Path, view_range: list[int], expected: str
) -> None:
    target = write(workspace / "f.txt", "".join(f"line {n}\n" for n in range(1, 11)))
    obs = await call(editor, command="view", path=str(target), view_range=view_range)
    assert obs.is_error
    assert expected in obs.text


async def test_view_of_a_missing_path_says_so(editor: FileEditorTool, workspace: Path) -> None:
    obs = await call(editor, command="view", path=str(workspace / "nope.py"))
    assert obs.is_error and "does not exist" in obs.text


async def test_view_of_a_directory_lists_two_levels_without_hidden_entries(
    editor: FileEditorTool, workspace: Path
) -> None:
    write(workspace / "README.md", "hi\n")
    write(workspace / "src" / "app.py", "")
    write(workspace / "src" / "deep" / "too_deep.py", "")
    write(workspace / ".env", "SECRET=1\n")
    write(workspace / ".git" / "config", "")
    write(workspace / "src" / ".cache", "")
    obs = await call(editor, command="view", path=str(workspace))
    assert not obs.is_error
    listed = obs.text.splitlines()
    assert str(workspace / "README.md") in listed
    assert str(workspace / "src") + "/" in listed
    assert str(workspace / "src" / "app.py") in listed
    assert str(workspace / "src" / "deep") + "/" in listed
    assert "too_deep.py" not in obs.text
    assert ".env" not in obs.text and ".git" not in obs.text and ".cache" not in obs.text


async def test_long_output_is_clipped_with_a_note(editor: FileEditorTool, workspace: Path) -> None:
    target = write(workspace / "big.txt", "".join(f"{n:08d} " * 10 + "\n" for n in range(2000)))
    obs = await call(editor, command="view", path=str(target))
    assert len(obs.text) < MAX_OUTPUT_CHARS + 500
    assert "response clipped" in obs.text and "view_range" in obs.text


# -- str_replace -------------------------------------------------------------------------------


async def test_str_replace_multi_line_edits_and_shows_the_region(
    editor: FileEditorTool, workspace: Path
) -> None:
    before = "def f():\n    a = 1\n    b = 2\n    return a + b\n"
    target = write(workspace / "m.py", before)
    obs = await call(
        editor,
        command="str_replace",
        path=str(target),
        old_str="    a = 1\n    b = 2\n",
        new_str="    a = 10\n    b = 20\n    c = 30\n",
    )
    assert not obs.is_error
    after = "def f():\n    a = 10\n    b = 20\n    c = 30\n    return a + b\n"
    assert read(target) == after
    assert "     2\t    a = 10\n     3\t    b = 20\n     4\t    c = 30" in obs.text
    assert obs.old_content == before and obs.new_content == after


async def test_str_replace_with_empty_new_str_deletes(
    editor: FileEditorTool, workspace: Path
) -> None:
    target = write(workspace / "m.py", "keep\ndrop\nkeep too\n")
    obs = await call(editor, command="str_replace", path=str(target), old_str="drop\n")
    assert not obs.is_error
    assert read(target) == "keep\nkeep too\n"


async def test_str_replace_not_found_leaves_the_file(
    editor: FileEditorTool, workspace: Path
) -> None:
    target = write(workspace / "m.py", "    indented = True\n")
    # Same words, a tab for the spaces: a verbatim match is required.
    obs = await call(
        editor, command="str_replace", path=str(target), old_str="\tindented = True", new_str="x"
    )
    assert obs.is_error
    assert "not found verbatim" in obs.text and "whitespace" in obs.text
    assert read(target) == "    indented = True\n"


async def test_str_replace_with_two_occurrences_names_both_lines(
    editor: FileEditorTool, workspace: Path
) -> None:
    target = write(workspace / "m.py", "x = 1\ny = 2\nx = 1\nz = 3\n")
    obs = await call(editor, command="str_replace", path=str(target), old_str="x = 1", new_str="")
    assert obs.is_error
    assert "occurs 2 times" in obs.text and "lines 1, 3" in obs.text
    assert read(target) == "x = 1\ny = 2\nx = 1\nz = 3\n"


async def test_str_replace_keeps_crlf_and_a_missing_final_newline(
    editor: FileEditorTool, workspace: Path
) -> None:
    crlf = write(workspace / "win.txt", "one\r\ntwo\r\nthree\r\n")
    await call(editor, command="str_replace", path=str(crlf), old_str="one\ntwo", new_str="1\n2")
    assert crlf.read_bytes() == b"1\r\n2\r\nthree\r\n"
    bare = write(workspace / "bare.txt", "a\nb")
    await call(editor, command="str_replace", path=str(bare), old_str="b", new_str="B")
    assert read(bare) == "a\nB"


async def test_edits_of_big_files_leave_the_contents_out_of_the_event(
    editor: FileEditorTool, workspace: Path
) -> None:
    target = write(workspace / "big.txt", "x" * 100_000 + "\nneedle\n")
    obs = await call(editor, command="str_replace", path=str(target), old_str="needle", new_str="n")
    assert not obs.is_error
    assert obs.old_content is None and obs.new_content is None
    assert read(target).endswith("\nn\n")


async def test_str_replace_on_a_directory_is_refused(
    editor: FileEditorTool, workspace: Path
) -> None:
    obs = await call(editor, command="str_replace", path=str(workspace), old_str="a", new_str="b")
    assert obs.is_error and "is a directory" in obs.text


# -- insert ----------------------------------------------------------------------------------


async def test_insert_at_top_middle_and_end(editor: FileEditorTool, workspace: Path) -> None:
    target = write(workspace / "l.txt", "b\nd\n")
    await call(editor, command="insert", path=str(target), insert_line=0, new_str="a")
    await call(editor, command="insert", path=str(target), insert_line=2, new_str="c\n")
    obs = await call(editor, command="insert", path=str(target), insert_line=4, new_str="e\nf")
    assert read(target) == "a\nb\nc\nd\ne\nf\n"
    assert "     5\te\n     6\tf" in obs.text


async def test_insert_keeps_a_missing_final_newline(
    editor: FileEditorTool, workspace: Path
) -> None:
    target = write(workspace / "l.txt", "a\nb")
    await call(editor, command="insert", path=str(target), insert_line=2, new_str="c")
    assert read(target) == "a\nb\nc"


async def test_insert_line_out_of_range_is_explained(
    editor: FileEditorTool, workspace: Path
) -> None:
    target = write(workspace / "l.txt", "a\nb\n")
    obs = await call(editor, command="insert", path=str(target), insert_line=5, new_str="z")
    assert obs.is_error
    assert "insert_line 5 is out of range" in obs.text and "between 0" in obs.text
    assert read(target) == "a\nb\n"


async def test_insert_needs_insert_line(editor: FileEditorTool, workspace: Path) -> None:
    target = write(workspace / "l.txt", "a\n")
    obs = await call(editor, command="insert", path=str(target), new_str="z")
    assert obs.is_error and "insert_line" in obs.text


# -- undo_edit -------------------------------------------------------------------------------


async def test_undo_steps_back_through_insert_str_replace_and_create(
    editor: FileEditorTool, workspace: Path
) -> None:
    target = workspace / "u.txt"
    await call(editor, command="create", path=str(target), file_text="one\n")
    await call(editor, command="str_replace", path=str(target), old_str="one", new_str="two")
    await call(editor, command="insert", path=str(target), insert_line=1, new_str="three")
    assert read(target) == "two\nthree\n"

    undone = await call(editor, command="undo_edit", path=str(target))
    assert not undone.is_error and read(target) == "two\n"
    assert "     1\ttwo" in undone.text
    await call(editor, command="undo_edit", path=str(target))
    assert read(target) == "one\n"
    removed = await call(editor, command="undo_edit", path=str(target))
    assert not target.exists() and "removed" in removed.text

    nothing = await call(editor, command="undo_edit", path=str(target))
    assert nothing.is_error and "nothing to undo" in nothing.text


async def test_undo_history_is_bounded_per_file(editor: FileEditorTool, workspace: Path) -> None:
    target = write(workspace / "n.txt", "0\n")
    for n in range(HISTORY_DEPTH + 2):
        await call(
            editor, command="str_replace", path=str(target), old_str=f"{n}\n", new_str=f"{n + 1}\n"
        )
    for _ in range(HISTORY_DEPTH):
        assert not (await call(editor, command="undo_edit", path=str(target))).is_error
    assert read(target) == "2\n"  # the two oldest versions were forgotten
    assert (await call(editor, command="undo_edit", path=str(target))).is_error


# -- files the editor refuses ------------------------------------------------------------------


async def test_binary_and_non_utf8_files_are_refused(
    editor: FileEditorTool, workspace: Path
) -> None:
    binary = workspace / "blob.bin"
    binary.write_bytes(b"\x7fELF\x00\x01\x02text")
    for arguments in (
        {"command": "view"},
        {"command": "str_replace", "old_str": "text", "new_str": "t"},
    ):
        obs = await call(editor, path=str(binary), **arguments)
        assert obs.is_error and "binary" in obs.text
    assert binary.read_bytes() == b"\x7fELF\x00\x01\x02text"
    latin1 = workspace / "latin1.txt"
    latin1.write_bytes("café\n".encode("latin-1"))
    obs = await call(editor, command="view", path=str(latin1))
    assert obs.is_error and "not UTF-8" in obs.text


async def test_oversized_files_are_refused_but_can_be_viewed_in_part(
    editor: FileEditorTool, workspace: Path
) -> None:
    line = "0123456789" * 10 + "\n"
    target = write(workspace / "huge.log", line * (MAX_FILE_BYTES // len(line) + 10))
    edit = await call(editor, command="str_replace", path=str(target), old_str="x", new_str="y")
    assert edit.is_error and "10.0 MB" in edit.text
    whole = await call(editor, command="view", path=str(target))
    assert whole.is_error and "view_range" in whole.text
    part = await call(editor, command="view", path=str(target), view_range=[2, 3])
    assert not part.is_error
    assert f"     2\t{line.strip()}\n     3\t{line.strip()}" in part.text
    assert "     4\t" not in part.text
