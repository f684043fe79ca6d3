"""core.files: a replaced file is either old or new, with the mode it should have."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from core.files import read_json, write_atomic, write_json


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


def test_a_new_file_gets_the_mode_asked_for(tmp_path: Path) -> None:
    target = tmp_path / "new.txt"
    write_atomic(target, b"hello")
    assert target.read_bytes() == b"hello" and mode(target) == 0o600
    write_atomic(tmp_path / "shared.txt", b"x", 0o644)
    assert mode(tmp_path / "shared.txt") == 0o644


def test_keep_mode_keeps_an_executable_executable(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\necho old\n")
    script.chmod(0o755)
    write_atomic(script, b"#!/bin/sh\necho new\n", keep_mode=True)
    assert script.read_text().endswith("new\n") and mode(script) == 0o755


def test_without_keep_mode_the_mode_is_the_one_given(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("old")
    script.chmod(0o755)
    write_atomic(script, b"new")
    assert mode(script) == 0o600


def test_a_failed_replace_keeps_the_old_file_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old")

    def refuse(src: str, dst: object, **where: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old" and leftovers(tmp_path) == []


def test_parents_are_made_unless_told_not_to(tmp_path: Path) -> None:
    write_atomic(tmp_path / "a" / "b" / "f", b"x")
    assert (tmp_path / "a" / "b" / "f").read_bytes() == b"x"
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "deleted" / "f", b"x", parents=False)
    assert not (tmp_path / "deleted").exists()


def test_json_round_trip(tmp_path: Path) -> None:
    value = {"b": [1, 2], "a": {"x": None}}
    write_json(tmp_path / "v.json", value)
    assert read_json(tmp_path / "v.json") == value
    assert (tmp_path / "v.json").read_text().startswith('{\n "a"')  # sorted, indented


def test_a_name_of_the_longest_length_can_be_replaced(tmp_path: Path) -> None:
    """The temporary file's name keeps only the start of the target's: a name of NAME_MAX
    bytes (255) plus a prefix and suffix could not be created beside it."""
    target = tmp_path / ("n" * 255)
    target.write_bytes(b"old")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new" and leftovers(tmp_path) == []
