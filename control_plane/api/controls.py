"""/api/v1/app-conversations/{id}/pause, /interrupt, /confirmation-policy,
/respond-to-confirmation and /llm: steering a conversation, relayed to its sandbox's agent server
(the browser never talks to a sandbox). As for every sandbox call: 404 for another user's or an
unknown id, 409 when the sandbox is in ERROR (or PAUSED, for pause and interrupt: resume it
first), 410 when it is MISSING, 502 when the agent server fails."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from control_plane.api.app_conversations import Ack, owned
from control_plane.api.io import body, services
from events.create import LLMTarget
from web.errors import Conflict
from web.io import doc, reply

ERRORS = (404, 409, 410, 502)


class NeverConfirm(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["NeverConfirm"]


class AlwaysConfirm(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["AlwaysConfirm"]


class ConfirmRisky(BaseModel):
    """Actions the model rates at or above `threshold` wait (and unrated ones, with
    `confirm_unknown`)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["ConfirmRisky"]
    threshold: Literal["LOW", "MEDIUM", "HIGH"] = "HIGH"
    confirm_unknown: bool = True


class ConfirmationPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: Annotated[NeverConfirm | AlwaysConfirm | ConfirmRisky, Field(discriminator="kind")]


class ConfirmationAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    accept: bool
    """True runs the actions waiting for confirmation; false rejects them."""
    reason: str | None = Field(default=None, max_length=10_000)


@doc(summary="Pause the agent between steps (a PauseEvent)", response=Ack, errors=ERRORS)
async def pause(request: Request) -> Response:
    row, _ = await owned(request)
    await services(request).conversations.control(row, "pause", None, resume=False)
    return reply(Ack())


@doc(
    summary="Interrupt at once: the in-flight model call or tool is cancelled (an InterruptEvent)",
    response=Ack,
    errors=ERRORS,
)
async def interrupt(request: Request) -> Response:
    row, _ = await owned(request)
    await services(request).conversations.control(row, "interrupt", None, resume=False)
    return reply(Ack())


@doc(
    summary="Set which actions wait for confirmation (NeverConfirm, AlwaysConfirm, ConfirmRisky)",
    body=ConfirmationPolicy,
    response=Ack,
    errors=ERRORS,
)
async def confirmation_policy(request: Request) -> Response:
    row, _ = await owned(request)
    change = await body(request, ConfirmationPolicy)
    await services(request).conversations.control(
        row, "confirmation-policy", {"policy": change.policy.model_dump()}, resume=True
    )
    return reply(Ack())


@doc(
    summary="Accept (run) or reject the actions waiting for confirmation",
    body=ConfirmationAnswer,
    response=Ack,
    errors=ERRORS,
)
async def respond_to_confirmation(request: Request) -> Response:
    row, _ = await owned(request)
    answer = await body(request, ConfirmationAnswer)
    sent = answer.model_dump(exclude_none=True)
    await services(request).conversations.control(row, "respond-to-confirmation", sent, resume=True)
    return reply(Ack())


class ApplyLLM(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run: bool = True
    """Run the conversation again once its model is switched (false: only switch it)."""


@doc(
    summary="Give the conversation the user's current model settings and run it again (a "
    "failed run is retried in place: the same conversation goes on, its events kept)",
    body=ApplyLLM,
    response=Ack,
    errors=ERRORS,
)
async def llm(request: Request) -> Response:
    """The settings a conversation started with stay its own (its model is fixed at its start),
    so fixing a wrong model or base URL in Settings helped only new conversations. This
    switches the conversation's LLM to the settings' model, called through the gateway with
    its sandbox's token as at its start (`create_request`: the user's key and base URL never
    enter the sandbox; the gateway reads them per call, so a new base URL or key reaches it
    there), and runs it again. 409 when no model is set."""
    row, _ = await owned(request)
    asked = await body(request, ApplyLLM)
    svc = services(request)
    settings = await svc.settings.get(row.user_id)
    if not settings.llm_model:
        raise Conflict("No language model is set: choose one in Settings")
    sandbox = await svc.sandboxes.owned(row.sandbox_id, row.user_id)
    access = svc.gateway.access(sandbox)
    target = LLMTarget(
        model=settings.llm_model,
        base_url=access.base_url,
        api_key=access.api_key,
        stream=settings.llm_stream,
    )
    svc.gateway.forget(row.user_id)  # the settings just changed reach the next call
    switch = {"llm": target.model_dump(exclude_none=True), "reason": "the user's settings"}
    await svc.conversations.control(row, "switch-llm", switch, resume=True)
    if asked.run:
        await svc.conversations.control(row, "run", None, resume=False)
    await svc.conversations.update(row, {"llm_model": settings.llm_model})
    return reply(Ack())
