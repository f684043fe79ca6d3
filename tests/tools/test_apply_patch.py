"""apply_patch against real files: the format, hunk matching, and that a failure anywhere
leaves every file as it was."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from events.tools.apply_patch import ApplyPatchObservation
from tests.support.tools import call, context
from tools import files
from tools.apply_patch import ApplyPatchTool, PatchError, parse
from tools.apply_patch.parse import AddFile, DeleteFile, UpdateFile


@pytest.fixture
def tool(workspace: Path) -> ApplyPatchTool:
    return ApplyPatchTool(context(workspace))


async def apply(tool: ApplyPatchTool, patch: str) -> ApplyPatchObservation:
    observation: ApplyPatchObservation = await call(tool, patch=patch)
    return observation


def patch(*body: str) -> str:
    return "\n".join(["*** Begin Patch", *body, "*** End Patch"]) + "\n"


# -- parsing -----------------------------------------------------------------------------------


def test_every_operation_is_parsed() -> None:
    ops = parse(
        patch(
            "*** Add File: new.txt",
            "+one",
            "+two",
            "*** Delete File: old.txt",
            "*** Update File: app.py",
            "*** Move to: src/app.py",
            "@@ def main():",
            "     x = 1",
            "-    y = 2",
            "+    y = 3",
            "",
            "@@",
            " last",
            "+after",
            "*** End of File",
        )
    )
    assert ops[0] == AddFile("new.txt", "one\ntwo\n")
    assert ops[1] == DeleteFile("old.txt")
    update = ops[2]
    assert isinstance(update, UpdateFile) and update.move_to == "src/app.py"
    first, second = update.hunks
    assert first.context == "def main():"
    assert first.old == ["    x = 1", "    y = 2", ""] and first.new == [
        "    x = 1",
        "    y = 3",
        "",
    ]
    assert second.context is None and second.at_end and second.new == ["last", "after"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "empty"),
        ("*** Update File: a\n@@\n-x\n+y\n*** End Patch", "must start with '*** Begin Patch'"),
        ("*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\n", "must end with '*** End Patch'"),
        (patch("*** Frobnicate File: a"), "Line 2 of the patch"),
        (patch("*** Add File: a", "no plus"), "starts with '+'"),
        (patch("*** Update File: a", "@@", "-x", "+y", "~z"), "Line 6"),
        (patch("*** Update File: a", "@@", "-x", "nope", "y"), "hunk 1"),
        (patch("*** Update File: a"), "has no hunk"),
        (patch(), "changes no file"),
        (patch("*** Add File: "), "names no file"),
    ],
)
def test_malformed_patches_say_which_line(text: str, said: str) -> None:
    with pytest.raises(PatchError) as exc:
        parse(text)
    assert said in str(exc.value)


# -- applying ----------------------------------------------------------------------------------


async def test_add_update_move_delete(tool: ApplyPatchTool, workspace: Path) -> None:
    (workspace / "app.py").write_text("def main():\n    x = 1\n    y = 2\n    return x + y\n")
    (workspace / "old.txt").write_text("bye\n")
    obs = await apply(
        tool,
        patch(
            "*** Add File: docs/new.md",
            "+# New",
            "*** Update File: app.py",
            "*** Move to: src/main.py",
            "@@ def main():",
            "     x = 1",
            "-    y = 2",
            "+    y = 3",
            "     return x + y",
            "*** Delete File: old.txt",
        ),
    )
    assert not obs.is_error, obs.text
    assert (workspace / "docs/new.md").read_text() == "# New\n"
    assert (workspace / "src/main.py").read_text() == (
        "def main():\n    x = 1\n    y = 3\n    return x + y\n"
    )
    assert not (workspace / "app.py").exists() and not (workspace / "old.txt").exists()
    assert "A docs/new.md" in obs.text and "M app.py -> src/main.py" in obs.text
    assert "D old.txt" in obs.text
    assert obs.commit is not None
    change = obs.commit.changes["app.py"]
    assert change.type == "update" and change.move_path == "src/main.py"
    assert change.new_content is not None and "y = 3" in change.new_content
    assert obs.commit.changes["old.txt"].old_content == "bye\n"
    assert obs.fuzz == 0


async def test_hunks_apply_in_order_and_the_context_line_narrows(
    tool: ApplyPatchTool, workspace: Path
) -> None:
    (workspace / "m.py").write_text("def a():\n    return 1\n\ndef b():\n    return 1\n")
    obs = await apply(
        tool, patch("*** Update File: m.py", "@@ def b():", "-    return 1", "+    return 2")
    )
    assert not obs.is_error, obs.text
    assert (workspace / "m.py").read_text() == "def a():\n    return 1\n\ndef b():\n    return 2\n"


async def test_whitespace_differences_match_with_fuzz(
    tool: ApplyPatchTool, workspace: Path
) -> None:
    (workspace / "f.txt").write_text("alpha   \nbeta\n")
    obs = await apply(tool, patch("*** Update File: f.txt", "@@", " alpha", "-beta", "+gamma"))
    assert not obs.is_error and obs.fuzz == 1 and "fuzz 1" in obs.text
    assert (workspace / "f.txt").read_text() == "alpha\ngamma\n"  # the hunk's lines win


async def test_end_of_file_anchor_and_crlf_kept(tool: ApplyPatchTool, workspace: Path) -> None:
    (workspace / "w.txt").write_bytes(b"x\r\ny\r\nx\r\n")
    obs = await apply(tool, patch("*** Update File: w.txt", "@@", "-x", "+z", "*** End of File"))
    assert not obs.is_error, obs.text
    assert (workspace / "w.txt").read_bytes() == b"x\r\ny\r\nz\r\n"


async def test_a_hunk_that_does_not_match_changes_nothing(
    tool: ApplyPatchTool, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("one\ntwo\n")
    (workspace / "b.txt").write_text("three\nfour\n")
    obs = await apply(
        tool,
        patch(
            "*** Add File: c.txt",
            "+new",
            "*** Update File: a.txt",
            "@@",
            "-one",
            "+ONE",
            "*** Update File: b.txt",
            "@@",
            "-three",
            "+THREE",
            "@@",
            " nowhere",
            "-four",
            "+FOUR",
        ),
    )
    assert obs.is_error and obs.commit is None
    assert "b.txt: hunk 2 (line 12 of the patch) does not match" in obs.text
    assert "|nowhere" in obs.text and "no file was changed" in obs.text
    assert (workspace / "a.txt").read_text() == "one\ntwo\n"
    assert (workspace / "b.txt").read_text() == "three\nfour\n"
    assert not (workspace / "c.txt").exists()


async def test_a_write_failing_midway_restores_the_files_written(
    tool: ApplyPatchTool, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (workspace / "a.txt").write_text("one\n")
    (workspace / "gone.txt").write_text("keep me\n")
    real = files.write_text
    calls: list[Path] = []

    def flaky(path: Path, text: str, **kw: Any) -> None:
        calls.append(path)
        if path.name == "z.txt" and text == "new\n":
            raise OSError(28, "No space left on device")
        real(path, text, **kw)

    monkeypatch.setattr(files, "write_text", flaky)
    obs = await apply(
        tool,
        patch(
            "*** Update File: a.txt",
            "@@",
            "-one",
            "+ONE",
            "*** Delete File: gone.txt",
            "*** Add File: deep/er/z.txt",
            "+new",
        ),
    )
    assert obs.is_error and "No space left on device" in obs.text and "restored" in obs.text
    assert (workspace / "a.txt").read_text() == "one\n"
    assert (workspace / "gone.txt").read_text() == "keep me\n"
    assert not (workspace / "deep").exists()  # the directories it made are gone too
    assert sorted(os.listdir(workspace)) == ["a.txt", "gone.txt"]  # no temp files left


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (("*** Add File: ../escape.txt", "+x"), "outside the workspace"),
        (("*** Delete File: /etc/hostname",), "outside the workspace"),
        (("*** Update File: link/secret.txt", "@@", "-s", "+t"), "outside the workspace"),
        (("*** Add File: a.txt", "+x"), "already exists"),
        (("*** Delete File: missing.txt",), "does not exist"),
        (
            (
                "*** Update File: a.txt",
                "*** Move to: b.txt",
                "@@",
                "-a",
                "+b",
                "*** Add File: b.txt",
                "+x",
            ),
            "changes this file twice",
        ),
    ],
)
async def test_refusals(
    tool: ApplyPatchTool, workspace: Path, tmp_path: Path, body: tuple[str, ...], said: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s\n")
    (workspace / "link").symlink_to(outside)
    (workspace / "a.txt").write_text("a\n")
    obs = await apply(tool, patch(*body))
    assert obs.is_error and said in obs.text, obs.text
    assert (outside / "secret.txt").read_text() == "s\n"
    assert not (tmp_path / "escape.txt").exists()
    assert (workspace / "a.txt").read_text() == "a\n"


async def test_big_contents_are_left_out_of_the_event(
    tool: ApplyPatchTool, workspace: Path
) -> None:
    (workspace / "big.txt").write_text("line\n" * 100_000)
    obs = await apply(tool, patch("*** Update File: big.txt", "@@", " line", "+added"))
    assert not obs.is_error and obs.commit is not None
    change = obs.commit.changes["big.txt"]
    assert change.old_content is None and change.new_content is None
