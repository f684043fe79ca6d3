"""MCP tools: one agent tool per tool of an MCP server (SPEC 2.7 MCPToolAction).

Their names, descriptions and argument schemas are known only once the server answers, so
an MCPTool carries them per instance. Connecting, calling and stopping servers is the
conversation's business (agent_server.agent.mcp); a tool here only hands its arguments to the
`call` it was given and gets an observation back.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from events.content import ToolAnnotations, ToolDefinition
from events.tools.mcp import MCPToolAction, MCPToolObservation
from tools.base import (
    META_ARGUMENTS,
    ImageContent,
    TextContent,
    Tool,
    ToolContext,
)

#: Characters of text an observation keeps (a chatty server must not flood the context).
MAX_TEXT = 50_000


Call = Callable[[dict[str, Any]], Awaitable[MCPToolObservation]]


class MCPTool(Tool):
    """A tool of an MCP server, under the name the model calls it by."""

    action_type = MCPToolAction
    observation_type = MCPToolObservation

    def __init__(
        self,
        ctx: ToolContext,
        *,
        name: str,
        description: str,
        schema: Mapping[str, Any],
        call: Call,
        server: str,
        remote_name: str,
        read_only: bool = False,
    ) -> None:
        super().__init__(ctx)
        # Per instance: these are class-level for the built-in tools.
        self.name = name  # type: ignore[misc]
        self.description = description  # type: ignore[misc]
        self.read_only = read_only  # type: ignore[misc]
        self.acts = not read_only  # type: ignore[misc]
        self.server, self.remote_name = server, remote_name
        self._schema = dict(schema)
        self._call = call
        own = set(self._schema.get("properties") or {})
        #: Meta arguments we add (and take off again); a tool's own argument of that name wins.
        self._meta = tuple(m for m in META_ARGUMENTS if m not in own) if self.acts else ()

    async def run(self, action: MCPToolAction) -> MCPToolObservation:
        return await self._call(action.data)

    def parameters(self) -> dict[str, Any]:  # type: ignore[override]
        out = {"type": "object", **self._schema}
        props = dict(out.get("properties") or {})
        if "security_risk" in self._meta:
            props["security_risk"] = {
                "type": "string",
                "enum": ["LOW", "MEDIUM", "HIGH"],
                "description": "Your assessment of the risk of this action.",
            }
        if "summary" in self._meta:
            props["summary"] = {
                "type": "string",
                "description": "About ten words saying what this action does.",
            }
        out["properties"] = props
        return out

    def definition(self) -> ToolDefinition:  # type: ignore[override]
        return ToolDefinition(
            kind=type(self).__name__,
            title=self.name,
            description=self.description,
            action_type=MCPToolAction.__name__,
            observation_type=MCPToolObservation.__name__,
            parameters=self.parameters(),
            annotations=ToolAnnotations(
                title=self.name, readOnlyHint=self.read_only, destructiveHint=not self.read_only
            ),
            meta={"mcp_server": self.server, "mcp_tool": self.remote_name},
        )

    def parse(self, arguments: Mapping[str, Any]) -> MCPToolAction:  # type: ignore[override]
        data = {k: v for k, v in arguments.items() if k not in self._meta}
        return MCPToolAction(data=data)


def observation(tool_name: str, result: Any) -> MCPToolObservation:
    """An MCP CallToolResult as the model reads it: a header line, then its content."""
    content: list[TextContent | ImageContent] = [
        TextContent(text=f"[Tool '{tool_name}' executed.]")
    ]
    budget = MAX_TEXT
    for item in getattr(result, "content", None) or []:
        kind = getattr(item, "type", None)
        if kind == "image":
            content.append(ImageContent(image_urls=[f"data:{item.mime_type};base64,{item.data}"]))
            continue
        if kind == "text":
            text = item.text
        elif kind == "resource":
            resource = item.resource
            text = getattr(resource, "text", None) or f"[resource {resource.uri}]"
        elif kind == "resource_link":
            text = f"[resource link {item.uri}: {item.name}]"
        else:
            text = f"[{kind} content omitted]"
        if budget <= 0:
            continue
        if len(text) > budget:
            text = text[:budget] + f"\n[... output cut at {MAX_TEXT} characters]"
        budget -= len(text)
        content.append(TextContent(text=text))
    structured = getattr(result, "structured_content", None)
    if len(content) == 1 and structured is not None:
        content.append(TextContent(text=json.dumps(structured, ensure_ascii=False)[:MAX_TEXT]))
    return MCPToolObservation(
        tool_name=tool_name, content=content, is_error=bool(getattr(result, "is_error", False))
    )


def failure(tool_name: str, message: str) -> MCPToolObservation:
    """The observation of a call that could not be made or finished (the server is down)."""
    return MCPToolObservation(
        tool_name=tool_name,
        is_error=True,
        content=[TextContent(text=f"[Tool '{tool_name}' failed.] {message}")],
    )


__all__ = ["MCPTool", "MCPToolAction", "MCPToolObservation", "failure", "observation"]
