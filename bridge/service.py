"""Service: what a session needs of the service, whichever part it talks to.

Two implementations: `AgentServer` (one agent server, its session key, its websocket) and
`ControlPlane` (an account key; conversations started through start tasks, everything else
through the control plane's routes and its event stream). A session never knows which one
it has.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from bridge.errors import NotFound, ServiceFailed
from bridge.http import Http
from bridge.schema import Event, parse_event

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Conversation:
    id: str
    #: Its working directory in the sandbox, when the service says (file paths are under it).
    working_dir: str | None = None
    execution_status: str | None = None
    #: Keys the bridge learnt with it that the service does not mask in its events (the
    #: sandbox's session key, which an agent can read from its server's environment).
    keys: tuple[str, ...] = ()


@dataclass
class Cursor:
    """Where a conversation's stream is: the last stored event delivered (None: none yet).
    The service moves it; a stream opened again with it starts after that event."""

    after: str | None = None


@dataclass
class NewConversation:
    """What session/new asks for."""

    #: The editor's working directory (where the sandbox can use it).
    cwd: str
    #: name -> `{command, args, env}` or `{url, headers}` (bridge.mcp).
    mcp_servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    #: The confirmation policy (bridge.modes).
    policy: dict[str, Any] = field(default_factory=dict)


def conversation_id(raw: str) -> str:
    """An ACP session id as a conversation id (a UUID); NotFound for anything else, so no
    session id ever reaches a URL unchecked."""
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise NotFound(f"no conversation has the id {raw[:100]!r}") from None


def read_event(data: dict[str, Any] | str | bytes) -> Event | None:
    """An event of a kind the bridge knows; None (logged) for anything else, so a newer server's
    new kinds never stop a session."""
    try:
        return parse_event(data)
    except ValidationError as exc:
        logger.warning(
            "an event the bridge cannot read was skipped: %s", exc.errors(include_input=False)[:1]
        )
        return None


class Service(Protocol):
    #: Whether a message may carry images.
    images: bool

    async def create(self, request: NewConversation) -> Conversation: ...

    async def get(self, conversation_id: str) -> Conversation:
        """NotFound when there is no such conversation (or not the account's)."""
        ...

    def history(self, conversation_id: str) -> AsyncIterator[Event]:
        """Its stored events, oldest first."""
        ...

    def follow(self, conversation_id: str, cursor: Cursor) -> AsyncIterator[Event]:
        """Stored events after the cursor, then each new one, with transient ones between
        (streaming text, state snapshots: never sent again after a reconnect), moving the
        cursor along. Resumes by itself after a drop; raises a BridgeError once it cannot
        (Unreachable after the reconnect window, NotFound when it was deleted)."""
        ...

    async def send(self, conversation_id: str, content: list[dict[str, Any]]) -> None:
        """A user message that runs the agent."""
        ...

    async def interrupt(self, conversation_id: str) -> None: ...

    async def set_policy(self, conversation_id: str, policy: dict[str, Any]) -> None: ...

    async def respond(self, conversation_id: str, accept: bool, reason: str) -> None: ...

    async def close(self) -> None: ...


__all__ = ["Conversation", "Cursor", "NewConversation", "Service", "conversation_id", "read_event"]


#: Events asked for per page of a conversation's history.
PAGE = 1000


class _Page(BaseModel):
    model_config = ConfigDict(extra="ignore")
    items: list[dict[str, Any]]
    next_page_id: str | None = None


async def stored_events(http: Http, search_path: str) -> AsyncIterator[Event]:
    """A conversation's stored events, oldest first, page by page from an events search (the
    agent server's and the control plane's answer alike)."""
    page: str | None = None
    while True:
        params: dict[str, str | int] = {"limit": PAGE, "sort_order": "TIMESTAMP"}
        if page:
            params["page_id"] = page
        data = await http.call("GET", search_path, params=params)
        try:
            found = _Page.model_validate(data)
        except ValidationError:
            raise ServiceFailed(
                f"{http.where} answered an events search the bridge cannot read"
            ) from None
        for item in found.items:
            event = read_event(item)
            if event is not None:
                yield event
        if not found.next_page_id:
            return
        page = found.next_page_id
