"""The webhooks a sandbox's agent server posts to (signed by the sandbox's webhook secret, or
with its X-Session-API-Key):
POST /api/v1/webhooks/events/{conversation_id} (SPEC 4.5): its events;
POST /api/v1/webhooks/conversations: a conversation's info when it starts, pauses, is updated
or deleted (the OpenHands app server's route)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from control_plane.api.io import services
from control_plane.api.paths import path_uuid
from web.io import Success, read_bounded, reply


async def receive(request: Request) -> Response:
    svc = services(request)
    conversation_id = path_uuid(request, "conversation_id")
    sandbox = await svc.webhook.sender(request.headers)  # admitted below once known (`intake`)
    limit = svc.config.max_webhook_body_bytes
    declared = request.headers.get("content-length", "")
    size = int(declared) if declared.isdigit() and int(declared) <= limit else limit
    with svc.intake.admit(sandbox.id, size):
        data = await read_bounded(request, limit)
        svc.webhook.check(sandbox, request.headers, data)
        await svc.webhook.receive(sandbox, conversation_id, data)
    return reply(Success())


async def conversation(request: Request) -> Response:
    svc = services(request)
    sandbox = await svc.webhook.sender(request.headers)
    data = await read_bounded(request, svc.config.max_webhook_body_bytes)
    svc.webhook.check(sandbox, request.headers, data)
    await svc.webhook.conversation(sandbox, data)
    return reply(Success())
