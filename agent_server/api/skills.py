"""/api/conversations/{id}/skills: the skills a conversation's agent has (SPEC 4.2)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from agent_server.agent import skills
from agent_server.api.io import conversation
from web.io import doc, reply


@doc(summary="The skills loaded from the conversation's workspace (AGENTS.md as always on)",
     response=skills.SkillList, errors=(404,))
async def list_skills(request: Request) -> Response:
    return reply(await conversation(request).skills())
