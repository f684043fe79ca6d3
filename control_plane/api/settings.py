"""GET and PATCH /api/v1/settings: the user's grouping strategy, LLM, default tools, git author."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from control_plane.api.io import body, services, user
from control_plane.settings import SettingsPatch, SettingsView
from web.io import doc, reply


@doc(summary="The user's settings (the LLM key masked, secrets by name)", response=SettingsView)
async def get(request: Request) -> Response:
    account = await user(request)
    return reply((await services(request).settings.get(account.id)).view())


@doc(
    summary="Change settings: fields left out stay, null clears, secrets merge by name",
    body=SettingsPatch,
    response=SettingsView,
)
async def patch(request: Request) -> Response:
    account = await user(request)
    change = await body(request, SettingsPatch)
    return reply((await services(request).settings.patch(account.id, change)).view())
