"""POST /api/v1/webhooks/events/{conversation_id} (SPEC 4.5): events pushed by a sandbox."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from control_plane.api.io import services
from control_plane.api.paths import path_uuid
from web.io import Success, read_bounded, reply


async def receive(request: Request) -> Response:
    svc = services(request)
    key = request.headers.get("x-session-api-key")
    conversation_id = path_uuid(request, "conversation_id")
    sandbox = await svc.webhook.sender(key)  # admitted below only once known (`intake`)
    limit = svc.config.max_webhook_body_bytes
    declared = request.headers.get("content-length", "")
    size = int(declared) if declared.isdigit() and int(declared) <= limit else limit
    with svc.intake.admit(sandbox.id, size):
        data = await read_bounded(request, limit)
        await svc.webhook.receive(key, conversation_id, data)
    return reply(Success())
