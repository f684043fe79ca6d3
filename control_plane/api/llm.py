"""The console's model helpers: POST /api/v1/settings/llm-check ("test connection": one short
call with the settings given, or the stored ones), GET /api/v1/settings/llm-models (the names
litellm knows, for the model field's suggestions) and POST
/api/v1/app-conversations/{id}/generate-title (a title from the first message, by the model)."""

from __future__ import annotations

import asyncio
import dataclasses

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from starlette.requests import Request
from starlette.responses import Response

from control_plane import llm
from control_plane.api.app_conversations import owned, shown
from control_plane.api.io import body, services, user
from control_plane.app_conversations import AppConversation
from web.errors import Conflict
from web.io import doc, reply


class LLMCheck(BaseModel):
    """Fields given are tried instead of the stored ones (the form's values before saving)."""

    model_config = ConfigDict(extra="forbid")
    llm_model: str | None = Field(default=None, min_length=1, max_length=200)
    llm_base_url: str | None = Field(default=None, max_length=2000, pattern=r"^https?://")
    llm_api_key: SecretStr | None = Field(default=None, max_length=10_000)


class LLMCheckResult(BaseModel):
    ok: bool
    detail: str
    """The model's answer when it worked; the error (class and message, the key masked)."""
    model: str | None


class LLMModels(BaseModel):
    models: list[str]


@doc(
    summary="Test the LLM settings with one short call (the body's fields replace the stored ones)",
    body=LLMCheck,
    response=LLMCheckResult,
)
async def check(request: Request) -> Response:
    account = await user(request)
    given = await body(request, LLMCheck)
    settings = await services(request).settings.get(account.id)
    changes = {name: getattr(given, name) for name in given.model_fields_set}
    if "llm_api_key" in changes:
        key = changes["llm_api_key"]
        changes["llm_api_key"] = key.get_secret_value() if key else None
    settings = dataclasses.replace(settings, **changes)
    answer = await llm.ask(
        settings,
        "Reply with the word OK.",
        max_tokens=5,
        loopback=services(request).provider.host_loopback,
    )
    return reply(LLMCheckResult(ok=answer.ok, detail=answer.text, model=settings.llm_model))


@doc(summary="The model names litellm knows (suggestions for llm_model)", response=LLMModels)
async def models(request: Request) -> Response:
    await user(request)
    return reply(LLMModels(models=await asyncio.to_thread(llm.known_models)))


@doc(
    summary="Title the conversation from its first message, by the user's model",
    response=AppConversation,
    errors=(404, 409),
)
async def generate_title(request: Request) -> Response:
    row, _ = await owned(request)
    svc = services(request)
    settings = await svc.settings.get(row.user_id)
    # The start's initial message is known before the first event is stored.
    message = await svc.tasks.initial_text(
        row.start_task_id, row.user_id
    ) or await svc.conversations.first_user_text(row.id)
    if not message.strip():
        raise Conflict("the conversation has no message yet")
    made = await llm.title(settings, message, loopback=svc.provider.host_loopback)
    if made is None:
        raise Conflict("the model gave no title (see the LLM settings' test connection)")
    updated = await svc.conversations.update(row, {"title": made})
    return reply(shown(request, [await svc.conversations.record(updated)])[0])
