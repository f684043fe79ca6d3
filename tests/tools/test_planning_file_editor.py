"""planning_file_editor: views anything in the workspace, writes only the plan file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from events.tools.file_editor import PlanningFileEditorObservation
from tests.support.tools import call as call_tool
from tests.support.tools import context
from tools.planning_file_editor import PlanningFileEditorParams, PlanningFileEditorTool


@pytest.fixture
def workspace(workspace: Path) -> Path:
    (workspace / "app.py").write_text("print('hi')\n")
    return workspace


async def call(
    workspace: Path, params: dict[str, Any] | None = None, **arguments: Any
) -> PlanningFileEditorObservation:
    observation: PlanningFileEditorObservation = await call_tool(
        PlanningFileEditorTool(context(workspace), params), **arguments
    )
    return observation


async def test_views_any_file_and_writes_the_plan(workspace: Path) -> None:
    view = await call(workspace, command="view", path=str(workspace / "app.py"))
    assert not view.is_error and "print('hi')" in view.text
    assert view.kind == "PlanningFileEditorObservation"
    plan = workspace / "PLAN.md"
    made = await call(workspace, command="create", path=str(plan), file_text="# Plan\n1. x\n")
    assert not made.is_error and plan.read_text() == "# Plan\n1. x\n"
    edited = await call(
        workspace, command="str_replace", path=str(plan), old_str="1. x", new_str="1. y"
    )
    assert not edited.is_error and plan.read_text() == "# Plan\n1. y\n"


@pytest.mark.parametrize(
    "command,extra",
    [
        ("create", {"file_text": "x"}),
        ("str_replace", {"old_str": "hi", "new_str": "bye"}),
        ("insert", {"insert_line": 0, "new_str": "x"}),
        ("undo_edit", {}),
    ],
)
async def test_every_other_file_is_refused(
    workspace: Path, command: str, extra: dict[str, Any]
) -> None:
    target = workspace / ("new.py" if command == "create" else "app.py")
    obs = await call(workspace, command=command, path=str(target), **extra)
    assert obs.is_error and "may only change the plan file" in obs.text
    assert (workspace / "app.py").read_text() == "print('hi')\n"
    assert not (workspace / "new.py").exists()


async def test_a_link_named_like_the_plan_does_not_open_another_file(workspace: Path) -> None:
    (workspace / "PLAN.md").symlink_to(workspace / "app.py")
    obs = await call(
        workspace,
        command="str_replace",
        path=str(workspace / "PLAN.md"),
        old_str="hi",
        new_str="bye",
    )
    assert obs.is_error and "symbolic link" in obs.text
    assert (workspace / "app.py").read_text() == "print('hi')\n"


async def test_configured_plan_path_and_outside_views(workspace: Path, tmp_path: Path) -> None:
    params = {"plan_path": "docs/plan.md"}
    ok = await call(
        workspace,
        params,
        command="create",
        path=str(workspace / "docs/plan.md"),
        file_text="plan\n",
    )
    assert not ok.is_error and (workspace / "docs/plan.md").read_text() == "plan\n"
    default = await call(
        workspace, params, command="create", path=str(workspace / "PLAN.md"), file_text="x"
    )
    assert default.is_error
    outside = await call(workspace, command="view", path=str(tmp_path))
    assert outside.is_error and "outside the workspace" in outside.text


@pytest.mark.parametrize("bad", ["", "../PLAN.md", "dir/", "a\0b"])
def test_bad_params_are_refused_at_creation(bad: str) -> None:
    with pytest.raises(ValidationError):
        PlanningFileEditorParams.model_validate({"plan_path": bad})
    with pytest.raises(ValidationError):
        PlanningFileEditorParams.model_validate({"plan": "x"})


async def test_a_leading_underscore_key_is_a_note_the_tool_ignores(workspace: Path) -> None:
    """The check at creation leaves `_` keys out; the tool must too (it forbids extra keys),
    else a conversation the server accepted could not make its tools."""
    params = {"plan_path": "docs/plan.md", "_note": "kept by the client"}
    made = await call(
        workspace,
        params,
        command="create",
        path=str(workspace / "docs/plan.md"),
        file_text="plan\n",
    )
    assert not made.is_error and (workspace / "docs/plan.md").read_text() == "plan\n"
