"""Skills: /api/conversations/{id}/skills, a conversation's agent's (SPEC 4.2); and POST
/api/skills, the OpenHands agent server's loader that a Cloud workspace client calls
(`load_skills_from_agent_server`) for a project directory of this server's workspace."""

from __future__ import annotations

import asyncio
from typing import Literal

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from agent_server.agent import skills
from agent_server.agent.spec import Lenient
from agent_server.api.io import conversation, read_body
from agent_server.api.schemas import PathText
from agent_server.api.workspace import scope
from agent_server.workspace import NotAFile
from web.errors import NotFound
from web.io import doc, reply


@doc(
    summary="The skills loaded from the conversation's workspace (AGENTS.md as always on)",
    response=skills.SkillList,
    errors=(404,),
)
async def list_skills(request: Request) -> Response:
    return reply(await conversation(request).skills())


class SkillsRequest(Lenient):
    """OpenHands' request; `org_config` and `sandbox_config` are accepted and not used."""

    load_public: bool = True
    load_user: bool = True
    load_project: bool = True
    load_org: bool = True
    project_dir: PathText | None = None


class LoadedSkill(BaseModel):
    """OpenHands' SkillInfo."""

    name: str
    type: Literal["repo", "knowledge", "agentskills"]
    """repo: AGENTS.md, always in the prompt; knowledge: one with triggers; agentskills: one
    the agent invokes by name (a SKILL.md of .agents/skills)."""
    content: str
    triggers: list[str]
    source: str | None
    description: str | None
    is_agentskills_format: bool
    disable_model_invocation: bool = False


class LoadedSkills(BaseModel):
    skills: list[LoadedSkill]
    sources: dict[str, int]
    """How many skills came from each source (only `project` here)."""


@doc(
    summary="The skills of a project directory of this server's workspace (AGENTS.md and "
    ".agents/skills/*/SKILL.md); public, user and organisation skills are not fetched",
    body=SkillsRequest,
    response=LoadedSkills,
    errors=(400, 403, 404),
)
async def load(request: Request) -> Response:
    body = await read_body(request, SkillsRequest)
    found: list[skills.Skill] = []
    if body.load_project and body.project_dir:
        try:
            directory = await scope(request).directory(body.project_dir, "project_dir")
        except NotAFile as exc:  # a file of that name: there is no such directory (404)
            raise NotFound(str(exc)) from None
        found = await asyncio.to_thread(skills.load, directory)
    return reply(
        LoadedSkills(
            skills=[
                LoadedSkill(
                    name=s.name,
                    content=s.body,
                    triggers=list(s.triggers),
                    source=s.source,
                    description=s.description,
                    is_agentskills_format=not s.always_on,
                    type="repo" if s.always_on else "knowledge" if s.triggers else "agentskills",
                )
                for s in found
            ],
            sources={"project": len(found)} if found else {},
        )
    )
