"""ControlPlane: the Service over a control plane's `/api/v1`, with an account key (Bearer).

A session's conversation is started through a start task: the control plane places it in a
sandbox as the user's settings say (grouping, the LLM, default tools), with the editor's MCP
servers as plugins. Everything after goes through the control plane's own routes, so the
sandbox's session key never reaches the bridge, a PAUSED sandbox is resumed by the next
message, and the bridge's reads count as activity. Events come from the control plane's
stream (server-sent events of its store, resumed with Last-Event-ID), with the model's text
as `event: delta` frames when the user's settings stream it (`llm_stream`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from bridge.config import Config
from bridge.errors import BridgeError, NotFound, ServiceFailed, StartFailed, Unreachable
from bridge.http import Http
from bridge.reconnect import Reconnect
from bridge.schema import Event
from bridge.service import (
    Conversation,
    Cursor,
    NewConversation,
    conversation_id,
    read_event,
    stored_events,
)

logger = logging.getLogger(__name__)

V1 = "/api/v1"
#: Seconds between two looks at a start task.
POLL = 0.25
#: The stream sends a keep-alive every 15 s: three missed and it is taken for dead.
READ_TIMEOUT = 45.0
#: The longest line of a stream taken (one event); a longer one is a broken stream.
MAX_LINE = 64 * 1024 * 1024


class _Task(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str
    status: str
    detail: str | None = None
    app_conversation_id: str | None = None


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str
    execution_status: str | None = None
    working_dir: str | None = None
    session_api_key: str | None = None


async def frames(response: httpx.Response) -> AsyncIterator[tuple[str, str | None, str]]:
    """(event type, id, data) of each server-sent event; comments and `retry:` skipped."""
    kind, event_id = "message", None
    data: list[str] = []
    async for line in response.aiter_lines():
        if len(line) > MAX_LINE:
            raise Unreachable("the control plane's stream sent a line over the limit")
        if not line:
            if data:
                yield kind, event_id, "\n".join(data)
            kind, event_id, data = "message", None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            kind = value
        elif name == "id":
            event_id = value


class ControlPlane:
    images = False  # the control plane's messages are text

    def __init__(self, config: Config, http: Http | None = None) -> None:
        self.http = http or Http(
            config.url,
            {"Authorization": f"Bearer {config.key.get_secret_value()}"},
            "the control plane",
            config.timeout,
        )
        self.start_timeout = config.start_timeout
        self.reconnect_window = config.reconnect_timeout

    async def create(self, request: NewConversation) -> Conversation:
        body: dict[str, Any] = {
            "plugins": [{"name": name, **entry} for name, entry in request.mcp_servers.items()],
            "secrets": request.secrets,
        }
        task = self._task(await self.http.call("POST", f"{V1}/app-conversations", json=body))
        deadline = time.monotonic() + self.start_timeout
        while task.status not in ("READY", "ERROR"):
            if time.monotonic() > deadline:
                raise Unreachable(
                    f"the conversation's start on {self.http.where} did not end "
                    f"within {self.start_timeout:g} s (last stage {task.status})"
                )
            await asyncio.sleep(POLL)
            found = await self.http.call(
                "GET", f"{V1}/app-conversations/start-tasks", params={"ids": task.id}
            )
            if not isinstance(found, list) or not found or found[0] is None:
                raise ServiceFailed(f"{self.http.where} lost start task {task.id}")
            task = self._task(found[0])
        if task.status == "ERROR" or not task.app_conversation_id:
            raise StartFailed(
                f"the control plane could not start the conversation: "
                f"{task.detail or 'no detail given'}"
            )
        await self.set_policy(task.app_conversation_id, request.policy)
        return await self.get(task.app_conversation_id)

    def _task(self, data: Any) -> _Task:
        try:
            return _Task.model_validate(data)
        except ValidationError:
            raise ServiceFailed(
                f"{self.http.where} answered with a start task the bridge cannot read"
            ) from None

    async def get(self, conversation_id_: str) -> Conversation:
        cid = conversation_id(conversation_id_)
        found = await self.http.call("GET", f"{V1}/app-conversations", params={"ids": cid})
        if not isinstance(found, list) or not found or found[0] is None:
            raise NotFound(f"no conversation {cid} on {self.http.where}")
        try:
            record = _Record.model_validate(found[0])
        except ValidationError:
            raise ServiceFailed(
                f"{self.http.where} answered with a conversation the bridge cannot read"
            ) from None
        status = record.execution_status.lower() if record.execution_status else None
        keys = (record.session_api_key,) if record.session_api_key else ()
        return Conversation(record.id, record.working_dir, status, keys)

    async def history(self, conversation_id_: str) -> AsyncIterator[Event]:
        cid = conversation_id(conversation_id_)
        async for event in stored_events(self.http, f"{V1}/conversation/{cid}/events/search"):
            yield event

    async def follow(self, conversation_id_: str, cursor: Cursor) -> AsyncIterator[Event]:
        cid = conversation_id(conversation_id_)
        reconnect = Reconnect(self.reconnect_window)
        while True:
            headers = {"Accept": "text/event-stream"}
            if cursor.after:
                headers["Last-Event-ID"] = cursor.after
            error: BridgeError
            try:
                async with self.http.stream(
                    f"{V1}/conversation/{cid}/events/stream",
                    headers=headers,
                    read_timeout=READ_TIMEOUT,
                ) as answer:
                    reconnect.connected()
                    async for kind, event_id, data in frames(answer):
                        if kind == "gone":
                            raise NotFound(f"conversation {cid} was deleted")
                        if kind not in ("message", "delta"):
                            continue
                        event = read_event(data)
                        if event is None:
                            continue
                        if kind == "message" and event_id:
                            cursor.after = event_id
                        yield event
                error = Unreachable(f"the stream of {self.http.where} ended")
            except (Unreachable, ServiceFailed) as exc:
                error = exc
            logger.info("%s; trying again", error.message)
            await reconnect.wait(error)

    async def _post(self, cid: str, path: str, body: dict[str, Any] | None = None) -> None:
        await self.http.call(
            "POST",
            f"{V1}/app-conversations/{conversation_id(cid)}{path}",
            json=body if body is not None else {},
        )

    async def send(self, conversation_id_: str, content: list[dict[str, Any]]) -> None:
        texts = [{"type": "text", "text": c["text"]} for c in content if c.get("type") == "text"]
        await self._post(
            conversation_id_, "/send-message", {"role": "user", "content": texts, "run": True}
        )

    async def interrupt(self, conversation_id_: str) -> None:
        await self._post(conversation_id_, "/interrupt")

    async def set_policy(self, conversation_id_: str, policy: dict[str, Any]) -> None:
        await self._post(conversation_id_, "/confirmation-policy", {"policy": policy})

    async def respond(self, conversation_id_: str, accept: bool, reason: str) -> None:
        await self._post(
            conversation_id_, "/respond-to-confirmation", {"accept": accept, "reason": reason}
        )

    async def close(self) -> None:
        await self.http.close()


__all__ = ["ControlPlane", "frames"]
