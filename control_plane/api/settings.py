"""GET and PATCH /api/v1/settings: the user's grouping strategy, LLM, default tools, git author."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from control_plane.api.io import audit, body, services, user
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
    view = (await services(request).settings.patch(account.id, change)).view()
    # Names only: what changed, never a value (a secret's, the LLM key's).
    secrets = change.secrets or {}
    fields = sorted(change.model_fields_set - {"secrets"})
    if fields:
        policy = change.network_policy if "network_policy" in fields else None
        details: dict[str, Any] = {"fields": fields}
        if policy is not None:
            details["network_policy"] = policy.model_dump(mode="json")
        known = [v for v in secrets.values() if v]
        if change.llm_api_key is not None:
            known.append(change.llm_api_key.get_secret_value())
        await audit(
            request, account, "settings.update", "user", account.id, details=details, secrets=known
        )
    for name, value in sorted(secrets.items()):
        action = "secret.delete" if value is None else "secret.set"
        await audit(request, account, action, "secret", name)
    return reply(view)
