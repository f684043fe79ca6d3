"""Calling a tool as the model does, for the tool tests: a context on a workspace, and one call
whose JSON arguments go through the tool's parse before it runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tools.base import Tool, ToolContext


def context(workspace: Path, **extra: Any) -> ToolContext:
    """A conversation's context on `workspace`, its state beside it (workspace/../state)."""
    return ToolContext("c1", working_dir=workspace, state_dir=workspace.parent / "state", **extra)


async def call(tool: Tool, **arguments: Any) -> Any:
    """One tool call as the model makes it: JSON arguments through parse, then run; the
    action and observation are checked to be the tool's own kinds."""
    action = tool.parse(arguments)
    assert isinstance(action, tool.action_type)
    observation = await tool.run(action)
    assert isinstance(observation, tool.observation_type)
    return observation
