"""Runtime: what a conversation's agent keeps between runs (its tools and its view)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

import tools as toolsets
from agent_server.agent import mcp, skills
from agent_server.agent.view import View
from agent_server.errors import from_pydantic, invalid
from agent_server.events import ServerErrorEvent, ToolDefinition, parse_event
from agent_server.models import AgentSpec, ToolSpec
from tools.base import Tool, ToolContext
from tools.mcp import MCPTool
from tools.skills import InvokeSkillTool

if TYPE_CHECKING:
    from agent_server.conversations import Conversation

logger = logging.getLogger(__name__)

#: Names the public OpenHands agent server uses for the same tool sets.
ALIASES = {
    "TerminalTool": "terminal",
    "BashTool": "terminal",
    "FileEditorTool": "file_editor",
    "TaskTrackerTool": "task_tracker",
    "BrowserToolSet": "browser_tool_set",
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
                ["body", "agent", "tools", i, "name"],
                f"Unknown tool {spec.name!r}; known tools: {', '.join(known)}",
                "unknown_tool",
                spec.name,
            )
        if toolset.params_model is not None:
            params = {k: v for k, v in spec.params.items() if not k.startswith("_")}
            try:
                toolset.params_model().model_validate(params)
            except ValidationError as exc:
                error = from_pydantic(exc, "body")
                for item in error.errors:
                    item["loc"] = ["body", "agent", "tools", i, "params", *item["loc"][1:]]
                raise error from None


def check_tools(agent: AgentSpec, secrets: Mapping[str, str] | None = None) -> None:
    """Tool names known, MCP placeholders fillable from the secrets (else a 422)."""
    check_tool_names(agent.tools)
    for loc, msg, type_ in mcp.check_config(agent.mcp_config, secrets or {}):
        raise invalid(["body", "agent", "mcp_config", *loc], msg, type_)


def git_env(name: str | None, email: str | None) -> dict[str, str]:
    """Commit authorship comes from settings, never from a push credential (SPEC 5 rule 5)."""
    name = name or "agent-server"
    email = email or "agent-server@localhost"
    return {
        "GIT_AUTHOR_NAME": name,
        "GIT_COMMITTER_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_EMAIL": email,
    }


class Runtime:
    def __init__(self, conv: Conversation) -> None:
        settings = conv.service.settings()
        self.ctx = ToolContext(
            conversation_id=conv.id,
            working_dir=conv.working_dir,
            state_dir=conv.directory / "tools",
            secrets=conv.secret_values,
            env=git_env(settings.git_user_name, settings.git_user_email),
            idle_timeout=conv.service.terminal_idle_timeout,
        )
        self.tools: dict[str, Tool] = {}
        sets = [*toolsets.ALWAYS]
        sets += [toolsets.TOOL_SETS[canonical(s.name)] for s in conv.record.agent.tools]
        # Keys starting with _ are the server's own (e.g. the shared browser), never a client's.
        params = {canonical(s.name): {k: v for k, v in s.params.items() if not k.startswith("_")}
                  for s in conv.record.agent.tools}
        if "browser_tool_set" in params:
            params["browser_tool_set"]["_manager"] = conv.service.browser_manager()
        for toolset in sets:
            for tool in toolset.make(self.ctx, params.get(toolset.name, {})):
                self.tools[tool.name] = tool
        self.conv = conv
        #: The MCP servers of agent.mcp_config; their tools join `tools` in start().
        self.mcp = mcp.MCPServers(conv.record.agent.mcp_config, self.ctx, conv.append)
        #: The workspace's skills (AGENTS.md, .agents/skills), read in start().
        self.skills: skills.SkillBook | None = None
        self.view: View | None = None
        #: SessionStart hooks ran in this process (SessionEnd runs only after them).
        self.session_started = False
        self._unsubscribe: Callable[[], None] | None = None
        self._llm_tools: tuple[tuple[tuple[str, int], ...], list[dict[str, Any]]] | None = None

    async def start(self) -> list[ServerErrorEvent]:
        """Read the skills (once), start the MCP servers not running; their failures.

        Called before each run, so a server that died, or a restarted process, gets its
        servers started again; the failures are events for the caller to append.
        """
        if self.skills is None:
            self.skills = await asyncio.to_thread(skills.book_for, self.conv)
            bodies = {name: skill.body for name, skill in self.skills.invocable.items()}
            if bodies:
                tool = InvokeSkillTool(self.ctx, bodies=bodies)
                self.tools[tool.name] = tool
        if not self.mcp:
            return []
        errors = await self.mcp.start()
        for name in [n for n, t in self.tools.items() if isinstance(t, MCPTool)]:
            del self.tools[name]
        for tool in self.mcp.tools(set(self.tools)):
            self.tools[tool.name] = tool
        return errors

    def definitions(self) -> list[ToolDefinition]:
        return [tool.definition() for tool in self.tools.values()]

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

    async def attach(self, conv: Conversation, vision: bool) -> View:
        """The view of the whole log, kept current by a subscription from now on."""
        if self.view is not None:
            return self.view
        log = await conv.log()
        view = View(vision=vision)
        backlog: list[Any] = []
        loading = True

        def listener(written: Any) -> None:
            if loading:
                backlog.extend(written)
            else:
                view.on_events(written)

        count = len(log)
        self._unsubscribe = log.subscribe(listener)
        events = await asyncio.to_thread(lambda: [parse_event(x) for x in log.read(range(count))])
        for event in events:
            view.add(event)
        view.on_events(backlog)
        loading = False
        self.view = view
        return view

    async def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        await self.mcp.close()
        for tool in self.tools.values():
            try:
                await tool.close()
            except Exception:
                logger.exception("closing tool %s failed", tool.name)
