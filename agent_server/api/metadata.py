"""PATCH /api/conversations/{id}: the title and tags a control plane keeps on a conversation."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from agent_server.api.io import conversation, doc, read_body, reply
from agent_server.models import ConversationInfo, UpdateConversation


@doc(summary="Update the title (null clears it) and the tags (given tags replace them all)",
     body=UpdateConversation, response=ConversationInfo, errors=(404,))
async def update(request: Request) -> Response:
    conv = conversation(request)
    body = await read_body(request, UpdateConversation)
    given = body.model_fields_set
    if "title" in given:
        conv.record.title = body.title
    if "tags" in given:
        conv.record.tags = body.tags or {}
    if given & {"title", "tags"}:
        await conv.save()
    return reply(ConversationInfo.of(conv.record))
