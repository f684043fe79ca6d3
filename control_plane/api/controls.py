"""/api/v1/app-conversations/{id}/pause, /interrupt, /confirmation-policy and
/respond-to-confirmation: steering a running conversation, relayed to its sandbox's agent server
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
