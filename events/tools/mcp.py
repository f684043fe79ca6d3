"""An MCP server's tool call and its result (SPEC 2.7 MCPToolAction): one kind for every
tool of every MCP server."""

from __future__ import annotations

from typing import Any, Literal

from events.tools.base import Action, Observation


class MCPToolAction(Action):
    kind: Literal["MCPToolAction"] = "MCPToolAction"
    #: The arguments, passed to the MCP tool as they are.
    data: dict[str, Any] = {}


class MCPToolObservation(Observation):
    kind: Literal["MCPToolObservation"] = "MCPToolObservation"
    #: The agent-side name of the tool that ran (`<server>_<tool>`).
    tool_name: str


__all__ = [
    "MCPToolAction",
    "MCPToolObservation",
]
