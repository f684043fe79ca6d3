"""PATCH /api/conversations/{id}: the title and tags a control plane keeps on a conversation."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from agent_server.api.conversations import notify
from agent_server.api.io import conversation, read_body
from agent_server.api.schemas import ConversationInfo, UpdateConversation
from web.io import doc, reply


@doc(
    summary="Update the title (null clears it) and the tags (given tags replace them all)",
    body=UpdateConversation,
    response=ConversationInfo,
    errors=(404,),
)
async def update(request: Request) -> Response:
    conv = conversation(request)
    body = await read_body(request, UpdateConversation)
    given = body.model_fields_set
    if given & {"title", "tags"}:
        await conv.update(
            title=body.title,
            clear_title="title" in given and body.title is None,
            tags=(body.tags or {}) if "tags" in given else None,
        )
        notify(request, conv.shown.info())
    return reply(conv.shown.info())
