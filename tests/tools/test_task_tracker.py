"""task_tracker with a real state directory: plans replace the list, the list outlives the
tool instance, bad plans change nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from events.tools.task_tracker import TaskItem
from tests.support.tools import call
from tools.base import ToolContext, ToolError
from tools.task_tracker import MAX_TASKS, MAX_TITLE_CHARS, STORE_NAME, TaskTrackerTool

PLAN = [
    {"title": "Read the failing test", "status": "done"},
    {"title": "Fix the parser", "status": "in_progress", "notes": "Off by one\nin tokenize()"},
    {"title": "Run the whole suite"},
]


def make_tool(state_dir: Path) -> TaskTrackerTool:
    ctx = ToolContext(conversation_id="c1", working_dir=state_dir.parent, state_dir=state_dir)
    return TaskTrackerTool(ctx)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


async def test_view_of_a_new_conversation_is_empty(state_dir: Path) -> None:
    obs = await call(make_tool(state_dir))  # command defaults to view
    assert not obs.is_error
    assert obs.command == "view" and obs.task_list == []
    assert "empty" in obs.text and "plan" in obs.text


async def test_plan_then_view_returns_the_list(state_dir: Path) -> None:
    tool = make_tool(state_dir)
    planned = await call(tool, command="plan", task_list=PLAN)
    assert not planned.is_error and planned.command == "plan"
    viewed = await call(tool, command="view")
    assert [t.title for t in viewed.task_list] == [p["title"] for p in PLAN]
    assert [t.status for t in viewed.task_list] == ["done", "in_progress", "todo"]
    assert viewed.task_list[1].notes == "Off by one\nin tokenize()"


async def test_markdown_shows_statuses_and_indented_notes(state_dir: Path) -> None:
    obs = await call(make_tool(state_dir), command="plan", task_list=PLAN)
    lines = obs.text.splitlines()
    assert "# Task list: 1 of 3 done, 1 in progress" in lines
    assert "- [x] 1. Read the failing test" in lines
    assert "- [ ] 2. Fix the parser (in progress)" in lines
    assert lines[lines.index("- [ ] 2. Fix the parser (in progress)") + 1] == "  Off by one"
    assert "  in tokenize()" in lines
    assert "- [ ] 3. Run the whole suite" in lines


async def test_plan_replaces_the_whole_list(state_dir: Path) -> None:
    tool = make_tool(state_dir)
    await call(tool, command="plan", task_list=PLAN)
    await call(tool, command="plan", task_list=[{"title": "Only this", "status": "done"}])
    obs = await call(tool, command="view")
    assert obs.task_list == [TaskItem(title="Only this", status="done")]


async def test_the_list_survives_a_new_tool_instance(tmp_path: Path, state_dir: Path) -> None:
    await call(make_tool(state_dir), command="plan", task_list=PLAN)
    # A restarted server makes a new tool on the same state directory.
    again = await call(make_tool(state_dir), command="view")
    assert [t.title for t in again.task_list] == [p["title"] for p in PLAN]
    other = await call(make_tool(tmp_path / "other-conversation"), command="view")
    assert other.task_list == []


async def test_the_store_is_one_json_file_without_leftovers(state_dir: Path) -> None:
    await call(make_tool(state_dir), command="plan", task_list=PLAN)
    await call(make_tool(state_dir), command="plan", task_list=PLAN[:1])
    assert sorted(p.name for p in state_dir.iterdir()) == [STORE_NAME]
    stored = json.loads((state_dir / STORE_NAME).read_text())
    first = {"title": "Read the failing test", "notes": "", "status": "done"}
    assert stored["task_list"] == [first]


@pytest.mark.parametrize(
    ("task_list", "expected"),
    [
        ([{"title": "step"}] * (MAX_TASKS + 1), f"the limit is {MAX_TASKS}"),
        ([{"title": "x" * (MAX_TITLE_CHARS + 1)}], "Move the details into notes"),
        ([{"title": "ok"}, {"title": "   "}], "Task 2 has an empty title"),
        ([{"title": "two\nlines"}], "one line"),
    ],
)
async def test_bad_plans_are_refused_and_change_nothing(
    state_dir: Path, task_list: list[dict[str, str]], expected: str
) -> None:
    tool = make_tool(state_dir)
    await call(tool, command="plan", task_list=PLAN)
    obs = await call(tool, command="plan", task_list=task_list)
    assert obs.is_error
    assert expected in obs.text and "not changed" in obs.text
    assert len((await call(tool, command="view")).task_list) == len(PLAN)


async def test_an_unreadable_store_is_reported_and_a_new_plan_recovers(state_dir: Path) -> None:
    state_dir.mkdir()
    (state_dir / STORE_NAME).write_text("{not json")
    tool = make_tool(state_dir)
    with pytest.raises(ToolError, match="unreadable"):
        await call(tool, command="view")
    await call(tool, command="plan", task_list=PLAN)
    assert len((await call(tool, command="view")).task_list) == len(PLAN)
