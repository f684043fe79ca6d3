"""The agent server's own failures, under the one tree of both services (`web.errors`).

    web.errors.ServiceError
    ├── NotFound
    │   └── ConversationGone         404: deleted (or the server stopping) while in use
    ├── Conflict
    │   └── InvalidTransition
    │       └── InvalidTransition    an execution-status move the table does not allow
    ├── WorkspaceError               400 (agent_server.workspace), and its 403/404/413 kinds
    └── UpstreamError
        ├── LLMFailure               (agent.llm)
        ├── GitFailed                (git)
        ├── CloneFailed              (repository)
        └── MCPServerError           (agent.mcp)

Everything else raises the shared classes (`InvalidInput`, `NotFound`, `Conflict`, ...) from
`web.errors`, whose handler answers for both services.
"""

from __future__ import annotations

from collections.abc import Sequence

from web import errors as web_errors
from web.errors import NotFound


class ConversationGone(NotFound):
    """The conversation was deleted (or the server is stopping) while a request used it."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"Conversation {conversation_id} was deleted")


class InvalidTransition(web_errors.InvalidTransition):
    """An execution-status move the table does not allow (`agent_server.status`)."""

    subject = "execution_status"


#: The tags of the `agent` union (agent.spec.AnyAgentSpec), which pydantic puts in an error's
#: loc; left out, so that `agent.llm.model` is located as it was before ACP agents.
AGENT_TAGS = ("Agent", "ACPAgent")
#: The tags of a secret value's forms (agent_server.record.SecretValue).
SECRET_TAGS = frozenset({"str", "StaticSecret", "LookupSecret"})


def untagged(loc: Sequence[str | int]) -> list[str | int]:
    """The location without the tags pydantic adds for a union's chosen variant (the agent's
    kind, a secret value's form): a client reads where in its own document the error is."""
    return [
        part
        for i, part in enumerate(loc)
        if not (i > 0 and loc[i - 1] == "agent" and part in AGENT_TAGS)
        and not (i > 1 and loc[i - 2] == "secrets" and part in SECRET_TAGS)
    ]
