"""What the agent server's routes read besides `web.io`: their services, the conversation a
path names, and bodies within the server's limit, located as a client wrote them."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel
from starlette.requests import HTTPConnection, Request

from agent_server.conversations import Conversation, ConversationService
from agent_server.errors import untagged
from agent_server.services import Services
from agent_server.telemetry import logs as log_context
from web import io
from web.errors import NotFound

M = TypeVar("M", bound=BaseModel)
MAX_BODY = 8 * 1024 * 1024


def services(conn: HTTPConnection) -> Services:
    return io.services(conn, Services)


def service(request: Request) -> ConversationService:
    return services(request).conversations


async def read_body(request: Request, model: type[M]) -> M:
    """The body as `model`, the tags of the agent and secret unions left out of error locs."""
    return await io.read_body(request, model, limit=MAX_BODY, untag=untagged)


async def read_object(request: Request) -> dict[str, Any]:
    return await io.read_object(request, limit=MAX_BODY)


def conversation(request: Request) -> Conversation:
    conv_id = io.path_uuid(request, "conversation_id")
    conv = service(request).get(conv_id)
    if conv is None:
        raise NotFound(f"Conversation {conv_id} not found")
    log_context.set_conversation(conv.id)  # what this request logs from here names it
    return conv
