"""BridgeAgent: the ACP agent side, each session being a conversation of the service.

    initialize        capabilities: load_session, images (where the service takes them),
                      embedded context, HTTP MCP servers
    session/new       a new conversation (the editor's working directory, its MCP servers),
                      with the confirmation policy of the approval mode
    session/load      an existing conversation: its history replayed as session/update
    session/prompt    a message that runs the agent; answered when the run rests
    session/cancel    interrupts the run
    session/set_mode  the approval mode (always-ask, always-approve, llm-approve)

A failure of the service is an ACP error whose message says what happened (errors.py);
nothing the bridge sends holds the key it was given (editor.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, ParamSpec, TypeVar

from acp import PROTOCOL_VERSION, RequestError
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    SetSessionModeResponse,
)

from bridge import mcp, modes
from bridge.content import Block
from bridge.editor import Editor
from bridge.errors import BridgeError, Invalid, NotFound
from bridge.service import NewConversation, Service
from bridge.session import Session

logger = logging.getLogger(__name__)

#: Sessions that follow their conversation's events at once; past it the least recently used
#: idle one stops following (its next prompt follows again, from where it stopped).
MAX_FOLLOWING = 32
#: Sessions known at once; past it the least recently used is forgotten (load it again).
MAX_SESSIONS = 256

P = ParamSpec("P")
R = TypeVar("R")


def answers(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """A BridgeError becomes the ACP error the editor reads (masked)."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(*args, **kwargs)
        except BridgeError as exc:
            agent = args[0]
            assert isinstance(agent, BridgeAgent)
            raise agent.editor.error(exc) from None

    return wrapper


def _version() -> str:
    try:
        return version("agent-server")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown"


class BridgeAgent:
    def __init__(self, service: Service, approval: str, secrets: dict[str, str]) -> None:
        self.service = service
        self.approval = approval
        #: What must never reach the editor (the key; MCP values added per session).
        self.secrets = dict(secrets)
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self._editor: Editor | None = None

    def on_connect(self, conn: Client) -> None:
        self._editor = Editor(conn, self.secrets)

    @property
    def editor(self) -> Editor:
        assert self._editor is not None, "on_connect comes first"
        return self._editor

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        self.editor.capabilities = client_capabilities or ClientCapabilities()
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(
                    image=self.service.images, audio=False, embedded_context=True
                ),
                mcp_capabilities=McpCapabilities(http=True, sse=False),
            ),
            agent_info=Implementation(
                name="agent-server", title="agent-server (sandboxed)", version=_version()
            ),
            auth_methods=[],
        )

    @answers
    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        servers = mcp.convert(mcp_servers)
        self.secrets.update(servers.secrets)  # the masker reads this mapping
        conversation = await self.service.create(
            NewConversation(
                cwd=cwd,
                mcp_servers=servers.servers,
                secrets=servers.secrets,
                policy=modes.policy(self.approval),
            )
        )
        session = Session(conversation, self.service, self.editor, cwd, self.approval)
        await self._keep(session, replay=False)
        return NewSessionResponse(session_id=session.id, modes=modes.state(session.mode))

    @answers
    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[Any] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        conversation = await self.service.get(session_id)
        try:
            await self.service.set_policy(conversation.id, modes.policy(self.approval))
        except Invalid as exc:  # read-only (its sandbox is gone): the history still loads
            logger.warning("the approval mode of %s was not set: %s", conversation.id, exc.message)
        old = self.sessions.pop(conversation.id, None)
        if old is not None:
            await old.close()
        session = Session(conversation, self.service, self.editor, cwd, self.approval)
        await self._keep(session, replay=True)
        return LoadSessionResponse(modes=modes.state(session.mode))

    async def _keep(self, session: Session, replay: bool) -> None:
        self.secrets.update({f"key {n} of {session.id}": key for n, key in enumerate(session.keys)})
        await session.open(replay)
        self.sessions[session.id] = session
        following = [s for s in self.sessions.values() if s.following]
        idle = [s for s in following if s.turn is None]
        for quiet in idle[: max(0, len(following) - MAX_FOLLOWING)]:
            await quiet.close()
        while len(self.sessions) > MAX_SESSIONS:
            _, oldest = self.sessions.popitem(last=False)
            await oldest.close()

    def _session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise NotFound(f"no session {session_id[:100]!r} here: create or load it first")
        self.sessions.move_to_end(session_id)
        return session

    @answers
    async def prompt(self, prompt: list[Block], session_id: str, **kwargs: Any) -> PromptResponse:
        return PromptResponse(stop_reason=await self._session(session_id).prompt(prompt))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            await session.cancel()

    @answers
    async def set_session_mode(
        self, mode_id: str, session_id: str, **kwargs: Any
    ) -> SetSessionModeResponse:
        if mode_id not in modes.MODE_IDS:
            raise RequestError.invalid_params(
                {"reason": f"unknown mode {mode_id[:50]!r}", "modes": list(modes.MODE_IDS)}
            )
        await self._session(session_id).set_mode(mode_id)
        return SetSessionModeResponse()

    async def close(self) -> None:
        sessions = list(self.sessions.values())
        self.sessions.clear()
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
        await self.service.close()


__all__ = ["MAX_FOLLOWING", "MAX_SESSIONS", "BridgeAgent"]
