"""The agent server's create request for a start: what its conversation is made from.

A start task asks the sandbox's agent server for the conversation (`POST /api/conversations`)
with the body built here, from the user's stored settings and the start request: the start's
own values win (its model; a secret of its own over a stored one of the same name, SPEC 5 rule
4). It is typed by the wire contract (`events.create`), which a test holds to the agent
server's own reading, so no field name of the agent server is spelled in the control plane.

The model the agent is given is the control plane's LLM gateway, reached with the sandbox's
own token, never the user's key or base URL: the agent server keeps a conversation's LLM where
the agent's commands can read it, so the user's key stays outside the sandbox
(`control_plane.gateway`).
"""

from __future__ import annotations

from control_plane.gateway.credentials import LLMAccess
from control_plane.settings import UserSettings
from control_plane.start_request import StartRequest
from events.content import TextContent
from events.create import (
    AgentRequest,
    CreateRequest,
    InitialMessage,
    LLMTarget,
    RepositoryRequest,
    ToolName,
    WorkspaceRequest,
)


def create_request(
    conversation_id: str,
    working_dir: str,
    request: StartRequest,
    user: UserSettings,
    *,
    gateway: LLMAccess,
    repository_url_template: str,
) -> CreateRequest:
    """The conversation `conversation_id` (the id chosen at placement, so that asking again
    after a takeover makes no second one), working in `working_dir`, its model called through
    `gateway` (`credentials.access`: the gateway as the sandbox reaches it, and its token);
    the selected repository's URL is `repository_url_template` filled with its name."""
    llm = LLMTarget(
        model=request.llm_model or user.llm_model or "",
        base_url=gateway.base_url,
        api_key=gateway.api_key,
        # StreamingDeltaEvents on the sandbox's socket (`control_plane.deltas`)
        stream=True if user.llm_stream else None,
    )
    mcp = {"mcpServers": {p.name: p.server() for p in request.plugins}} if request.plugins else None
    repository = None
    if request.selected_repository:
        repository = RepositoryRequest(
            url=repository_url_template.format(repository=request.selected_repository),
            branch=request.selected_branch or None,
        )
    message = request.initial_message
    return CreateRequest(
        conversation_id=conversation_id,
        agent=AgentRequest(
            llm=llm, tools=[ToolName(name=t) for t in user.default_tools], mcp_config=mcp
        ),
        workspace=WorkspaceRequest(working_dir=working_dir),
        # A conversation's own secret wins over a stored one of the same name (SPEC 5 rule 4).
        secrets={**user.secrets, **request.secrets},
        title=request.title or None,
        initial_message=None
        if message is None
        else InitialMessage(
            content=[TextContent(text=item.text) for item in message.content], run=message.run
        ),
        repository=repository,
        observability_span_name=request.observability_span_name,
        observability_tags=list(request.observability_tags),
        observability_metadata=dict(request.observability_metadata),
    )
