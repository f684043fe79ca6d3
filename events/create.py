"""A conversation's creation as another program asks for it: the body of
`POST /api/conversations` that the control plane sends a sandbox's agent server.

The agent server reads a richer request (`agent_server.record.CreateConversation`: the whole
agent specification, hooks, policies, the SDK's fields); this is the part a client builds,
typed, so the control plane never spells the agent server's field names in a raw dict. A
test holds the two together: every body made from these types is one the agent server takes,
field for field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from events.content import ImageContent, Strict, TextContent


class LLMTarget(Strict):
    """The model the agent calls, and where (for a sandbox: the control plane's gateway and
    the sandbox's own token, never a user's key)."""

    model: str
    base_url: str | None = None
    api_key: str | None = Field(default=None, repr=False)  # never in a log line
    stream: bool | None = None
    """True: streaming deltas on the conversation's socket."""


class ToolName(Strict):
    name: str


class AgentRequest(Strict):
    llm: LLMTarget
    tools: list[ToolName] = []
    mcp_config: dict[str, Any] | None = None
    """`{"mcpServers": {name: server}}`, as MCP clients configure servers."""


class WorkspaceRequest(Strict):
    working_dir: str


class RepositoryRequest(Strict):
    """Cloned into the working directory before the first step."""

    url: str
    branch: str | None = None


class InitialMessage(Strict):
    role: Literal["user"] = "user"
    content: list[TextContent | ImageContent]
    run: bool = True


class CreateRequest(Strict):
    conversation_id: str
    agent: AgentRequest
    workspace: WorkspaceRequest
    secrets: dict[str, str] = Field(default={}, repr=False)
    title: str | None = None
    initial_message: InitialMessage | None = None
    repository: RepositoryRequest | None = None
    observability_span_name: str | None = None
    observability_tags: list[str] = []
    observability_metadata: dict[str, Any] = {}

    def body(self) -> dict[str, Any]:
        """The JSON body: what was not given is left out, for the agent server's defaults."""
        return self.model_dump(mode="json", exclude_none=True)
