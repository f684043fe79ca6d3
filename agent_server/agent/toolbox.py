"""Toolbox: the tools of one conversation's agent, built from an explicit ToolContext.

It holds the tool sets named in `agent.tools` (plus finish and think), the workspace's
invocable skills and the MCP servers' tools; `check_tools` refuses, at creation, what it could
not build. It knows nothing of the conversation beyond its ToolContext.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import ValidationError

import tools as toolsets
from agent_server.agent import mcp, mcp_config, skills
from agent_server.agent.spec import AgentSpec, ToolSpec
from events import Event, ServerErrorEvent, ToolDefinition
from tools.base import Tool, ToolContext, params_as
from tools.mcp import MCPTool
from tools.skills import InvokeSkillTool
from web.errors import from_pydantic, invalid

logger = logging.getLogger(__name__)

#: Names the public OpenHands agent server uses for the same tool sets.
ALIASES = {
    "TerminalTool": "terminal",
    "BashTool": "terminal",
    "FileEditorTool": "file_editor",
    "TaskTrackerTool": "task_tracker",
    "BrowserToolSet": "browser_tool_set",
    **toolsets.ALIASES,
}


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def check_tool_names(tools: list[ToolSpec]) -> None:
    """An unknown tool name, or params its tool set refuses, is a 422 (names the known ones)."""
    known = sorted(toolsets.TOOL_SETS)
    for i, spec in enumerate(tools):
        toolset = toolsets.TOOL_SETS.get(canonical(spec.name))
        if toolset is None:
            raise invalid(
                ["agent", "tools", i, "name"],
                f"Unknown tool {spec.name!r}; known tools: {', '.join(known)}",
                "unknown_tool",
                spec.name,
            )
        if toolset.params_model is not None:
            try:
                params_as(toolset.params_model(), spec.params)
            except ValidationError as exc:
                raise from_pydantic(exc, "agent", "tools", i, "params") from None


def check_tools(agent: AgentSpec, secrets: Mapping[str, str] | None = None) -> None:
    """Tool names known, MCP placeholders fillable from the secrets (else a 422)."""
    check_tool_names(agent.tools)
    for loc, msg, type_ in mcp_config.check_config(agent.mcp_config, secrets or {}):
        raise invalid(["agent", "mcp_config", *loc], msg, type_)


class Toolbox:
    """The conversation's tools, by the name the model calls them."""

    def __init__(
        self, ctx: ToolContext, agent: AgentSpec, report: Callable[..., Awaitable[list[Event]]]
    ) -> None:
        self.ctx = ctx
        self.tools: dict[str, Tool] = {}
        sets = [*toolsets.ALWAYS]
        sets += [toolsets.TOOL_SETS[canonical(s.name)] for s in agent.tools]
        params = {canonical(s.name): dict(s.params) for s in agent.tools}
        for toolset in sets:
            for tool in toolset.make(ctx, params.get(toolset.name, {})):
                self.tools[tool.name] = tool
        #: The MCP servers of agent.mcp_config; their tools join `tools` in start().
        self.mcp = mcp.MCPServers(agent.mcp_config, ctx, report)
        self._skills_added = False
        self._llm_tools: tuple[tuple[tuple[str, int], ...], list[dict[str, Any]]] | None = None

    async def start(self, book: skills.SkillBook) -> list[ServerErrorEvent]:
        """Add the invocable skills (once), start the MCP servers not running; their failures.

        Called before each run, so a server that died, or a restarted process, gets its
        servers started again; the failures are events for the caller to append.
        """
        if not self._skills_added:
            self._skills_added = True
            bodies = {name: skill.body for name, skill in book.invocable.items()}
            if bodies:
                tool = InvokeSkillTool(self.ctx, bodies=bodies)
                self.tools[tool.name] = tool
        if not self.mcp:
            return []
        errors = await self.mcp.start()
        for name in [n for n, t in self.tools.items() if isinstance(t, MCPTool)]:
            del self.tools[name]
        for mcp_tool in self.mcp.tools(set(self.tools)):
            self.tools[mcp_tool.name] = mcp_tool
        return errors

    def definitions(self) -> list[ToolDefinition]:
        return [tool.definition() for tool in self.tools.values()]

    def acts(self, name: str) -> bool:
        """Whether calling `name` changes the world (an unknown tool is assumed to)."""
        tool = self.tools.get(name)
        return True if tool is None else tool.acts

    def llm_tools(self) -> list[dict[str, Any]]:
        """The tool schemas of an LLM request, built again only when the tools changed."""
        names = tuple((name, id(tool)) for name, tool in self.tools.items())
        if self._llm_tools is None or self._llm_tools[0] != names:
            schemas = [
                {
                    "type": "function",
                    "function": {
                        "name": d.title,
                        "description": d.description,
                        "parameters": d.parameters,
                    },
                }
                for d in self.definitions()
            ]
            self._llm_tools = (names, schemas)
        return self._llm_tools[1]

    async def close(self) -> None:
        await self.mcp.close()
        for tool in self.tools.values():
            try:
                await tool.close()
            except Exception:
                logger.exception("closing tool %s failed", tool.name)
