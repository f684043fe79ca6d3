"""/api/settings: the stored default agent, secrets shown masked."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from agent_server.api.io import read_object, services
from agent_server.settings import Settings
from web.io import doc, located, reply


@doc(summary="The stored settings (secrets masked)", response=Settings)
async def get(request: Request) -> Response:
    return reply(services(request).settings.public())


@doc(
    summary="Deep-merge into the stored settings; the result is validated whole",
    body=Settings,
    response=Settings,
)
async def patch(request: Request) -> Response:
    changes = await read_object(request)
    store = services(request).settings
    with located("body"):
        await store.patch(changes)
    services(request).conversations.refresh_secrets()
    return reply(store.public())
