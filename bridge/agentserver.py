"""AgentServer: the Service over one agent server, with its session key (`X-Session-API-Key`).

Conversations are created in the editor's working directory (or --working-dir) with the
server's stored agent, or the one of --agent-file with the editor's MCP servers added. Events
come from the conversation's websocket: the stored ones after a given id (`after_id`), then
live ones with the streaming text between; after a drop the socket is opened again after the
last event known to be stored (a state update other than `execution_status` may be a
transient snapshot, whose id the log does not know).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

from pydantic import BaseModel, ConfigDict, ValidationError
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from bridge.config import Config
from bridge.errors import BridgeError, NotFound, Refused, ServiceFailed, Unreachable
from bridge.http import Http
from bridge.reconnect import Reconnect
from bridge.schema import ConversationStateUpdateEvent, Event, StreamingDeltaEvent
from bridge.service import (
    Conversation,
    Cursor,
    NewConversation,
    conversation_id,
    read_event,
    stored_events,
)

logger = logging.getLogger(__name__)

HEADER = "X-Session-API-Key"
#: Events per page of a history read (the server's largest page).
#: The largest websocket frame taken (one event; the server bounds what an event holds).
FRAME_LIMIT = 64 * 1024 * 1024
#: The server's close codes: a refused key, a conversation that is not (or no longer) there.
CLOSE_UNAUTHORIZED = 4001
CLOSE_NOT_FOUND = 4004


class _Workspace(BaseModel):
    model_config = ConfigDict(extra="ignore")
    working_dir: str


class _Info(BaseModel):
    """The fields of ConversationInfo the bridge reads."""

    model_config = ConfigDict(extra="ignore")
    id: str
    workspace: _Workspace
    execution_status: str


def _resumable(event: Event) -> bool:
    """Whether the event is surely in the log (its id can be resumed after)."""
    if isinstance(event, StreamingDeltaEvent) or event.kind == "ServerErrorEvent":
        return False
    if isinstance(event, ConversationStateUpdateEvent):
        return event.key == "execution_status"
    return True


class AgentServer:
    images = True

    def __init__(self, config: Config, http: Http | None = None) -> None:
        key = config.key.get_secret_value()
        self.http = http or Http(config.url, {HEADER: key}, "the agent server", config.timeout)
        self._key = key
        self._socket_base = "ws" + config.url.rstrip("/")[len("http") :]
        self.working_dir = config.working_dir
        self.agent = config.agent
        self.timeout = config.timeout
        self.reconnect_window = config.reconnect_timeout

    def _conversation(self, data: Any) -> Conversation:
        try:
            info = _Info.model_validate(data)
        except ValidationError:
            raise ServiceFailed(
                f"{self.http.where} answered with a conversation the bridge cannot read"
            ) from None
        return Conversation(info.id, info.workspace.working_dir, info.execution_status)

    async def create(self, request: NewConversation) -> Conversation:
        body: dict[str, Any] = {
            "workspace": {"working_dir": self.working_dir or request.cwd},
            "confirmation_policy": request.policy,
        }
        if self.agent is not None:
            agent = copy.deepcopy(self.agent)
            if request.mcp_servers and agent.get("kind") != "ACPAgent":
                config = agent.get("mcp_config") or {}
                config["mcpServers"] = {**config.get("mcpServers", {}), **request.mcp_servers}
                agent["mcp_config"] = config
                body["secrets"] = request.secrets
            body["agent"] = agent
        elif request.mcp_servers:
            logger.warning(
                "the editor's MCP servers are not passed on: the server's stored agent "
                "is used as it is (give --agent-file to add them)"
            )
        return self._conversation(await self.http.call("POST", "/api/conversations", json=body))

    async def get(self, conversation_id_: str) -> Conversation:
        cid = conversation_id(conversation_id_)
        return self._conversation(await self.http.call("GET", f"/api/conversations/{cid}"))

    async def history(self, conversation_id_: str) -> AsyncIterator[Event]:
        cid = conversation_id(conversation_id_)
        async for event in stored_events(self.http, f"/api/conversations/{cid}/events/search"):
            yield event

    async def follow(self, conversation_id_: str, cursor: Cursor) -> AsyncIterator[Event]:
        cid = conversation_id(conversation_id_)
        reconnect = Reconnect(self.reconnect_window)
        while True:
            start = {"after_id": cursor.after} if cursor.after else {"resend_all": "true"}
            query = urlencode(start)
            url = f"{self._socket_base}/sockets/events/{cid}?{query}"
            code: int | None = None
            try:
                async with connect(
                    url,
                    additional_headers={HEADER: self._key},
                    open_timeout=self.timeout,
                    close_timeout=2,
                    max_size=FRAME_LIMIT,
                ) as socket:
                    first = True
                    async for frame in socket:
                        reconnect.connected()
                        event = read_event(frame)
                        if event is None:
                            continue
                        if first and isinstance(event, ConversationStateUpdateEvent):
                            first = False  # the `full_state` snapshot every socket opens with
                            continue
                        first = False
                        if _resumable(event) and event.id:
                            cursor.after = event.id
                        yield event
                    code = socket.close_code
                error: BridgeError = Unreachable(f"the socket of {self.http.where} was closed")
            except ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd is not None else None
                error = Unreachable(f"lost the socket of {self.http.where}")
            except InvalidStatus as exc:
                error = self.http.failure_status(exc.response.status_code)
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                error = Unreachable(f"cannot reach {self.http.where} ({type(exc).__name__})")
            if code == CLOSE_UNAUTHORIZED:
                raise Refused(
                    f"{self.http.where} refused the key; check the key the bridge was given"
                )
            if code == CLOSE_NOT_FOUND:
                raise NotFound(f"conversation {cid} is not on {self.http.where} (deleted?)")
            if isinstance(error, (Refused, NotFound)):
                raise error
            logger.info("%s; trying again", error.message)
            await reconnect.wait(error)

    async def _post(self, cid: str, path: str, body: dict[str, Any] | None = None) -> None:
        await self.http.call(
            "POST",
            f"/api/conversations/{conversation_id(cid)}{path}",
            json=body if body is not None else {},
        )

    async def send(self, conversation_id_: str, content: list[dict[str, Any]]) -> None:
        await self._post(
            conversation_id_, "/events", {"role": "user", "content": content, "run": True}
        )

    async def interrupt(self, conversation_id_: str) -> None:
        await self._post(conversation_id_, "/interrupt")

    async def set_policy(self, conversation_id_: str, policy: dict[str, Any]) -> None:
        await self._post(conversation_id_, "/confirmation_policy", {"policy": policy})

    async def respond(self, conversation_id_: str, accept: bool, reason: str) -> None:
        await self._post(
            conversation_id_,
            "/events/respond_to_confirmation",
            {"accept": accept, "reason": reason},
        )

    async def close(self) -> None:
        await self.http.close()


__all__ = ["AgentServer"]
