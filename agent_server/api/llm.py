"""The LLM of a conversation: switch it to a saved profile or to another LLM, rotate its key.

A switch holds from the next LLM request on (a running agent finishes its current step with
the old one) and is recorded as a ConversationStateUpdateEvent with key "llm".
"""

from __future__ import annotations

from pydantic import Field
from starlette.requests import Request
from starlette.responses import Response

from agent_server.agent.spec import Lenient, LLMConfig
from agent_server.api.io import conversation, read_body
from tools.conversation import ProfileNotFound
from web.errors import NotFound
from web.io import Success, doc, reply


class SwitchProfile(Lenient):
    """POST .../switch_profile (the public agent server's shape, plus an optional reason)."""

    profile_name: str = Field(min_length=1, max_length=100)
    """A saved profile (settings `llm_profiles`)."""
    reason: str = Field(default="", max_length=2000)


class SwitchLLM(Lenient):
    """POST .../switch_llm: a whole LLM, no profile."""

    llm: LLMConfig
    reason: str = Field(default="", max_length=2000)


class RotateKey(Lenient):
    """POST .../llm_key: a new key for the conversation's own LLM."""

    api_key: str = Field(min_length=1, max_length=10_000)


@doc(
    summary="Switch the conversation to a saved LLM profile (from the next request on)",
    body=SwitchProfile,
    response=Success,
    errors=(404,),
)
async def switch_profile(request: Request) -> Response:
    conv = conversation(request)
    body = await read_body(request, SwitchProfile)
    try:
        await conv.switch_profile(body.profile_name, body.reason)
    except ProfileNotFound:
        raise NotFound(f"Profile {body.profile_name!r} not found") from None
    return reply(Success())


@doc(
    summary="Switch the conversation to this LLM (from the next request on)",
    body=SwitchLLM,
    response=Success,
    errors=(404,),
)
async def switch_llm(request: Request) -> Response:
    conv = conversation(request)
    body = await read_body(request, SwitchLLM)
    await conv.switch_llm(body.llm, body.reason)
    return reply(Success())


@doc(
    summary="Rotate the API key of the conversation's own LLM (409 while a profile is in "
    "force: rotate the profile's key in the settings)",
    body=RotateKey,
    response=Success,
    errors=(404, 409),
)
async def rotate_key(request: Request) -> Response:
    conv = conversation(request)
    body = await read_body(request, RotateKey)
    await conv.rotate_llm_key(body.api_key)
    return reply(Success())
