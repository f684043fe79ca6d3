"""What a client inherits from its account (the OpenHands app server's routes for it):

- GET /api/v1/users/me: the user and their settings, the LLM key masked; with
  `expose_secrets=true`, and only when the request also carries the session key of one of the
  caller's live sandboxes (`X-Session-API-Key`), the LLM as that sandbox is to call it: the LLM
  gateway's URL and the sandbox's own token (what the Cloud workspace's `get_llm()` sends:
  both, to build the LLM of a conversation it creates in that sandbox). The user's real key
  never leaves the control plane (`control_plane.gateway`);
- GET /api/v1/sandboxes/{id}/settings/secrets[/{name}]: the names of the user's stored
  secrets, and one value as text, for that sandbox's session key only (what a `LookupSecret`
  inside the sandbox fetches: the values never pass through the client).

Every read of a value (or of a sandbox's token) is logged with the secret's name, the sandbox
and the user, never the value.
"""

from __future__ import annotations

import logging

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import Response

from control_plane.api.io import audit as record
from control_plane.api.io import services, user
from control_plane.api.paths import path_id
from control_plane.audit import by_sandbox
from control_plane.models import GroupingStrategy, SandboxRow
from control_plane.settings import MASK, SECRET_NAME
from web.errors import Forbidden, NotFound, Unauthorized, invalid
from web.io import doc, read_query, reply

audit = logging.getLogger("control_plane.secrets_access")


class MeQuery(BaseModel):
    expose_secrets: bool = False
    """True: the LLM as the sandbox of X-Session-API-Key (one of your live sandboxes) calls
    it: the gateway's URL and that sandbox's token as the key."""


class McpConfig(BaseModel):
    """The app server's user MCP settings; this control plane has none per user (MCP servers
    come with a start request's plugins), so they are empty."""

    sse_servers: list[dict[str, object]] = Field(default_factory=list)
    stdio_servers: list[dict[str, object]] = Field(default_factory=list)
    shttp_servers: list[dict[str, object]] = Field(default_factory=list)


class UserInfo(BaseModel):
    id: str
    name: str
    llm_model: str | None
    llm_base_url: str | None
    llm_api_key: str | None
    """`**********` when set; exposed (see MeQuery): the sandbox's token for the gateway."""
    grouping_strategy: GroupingStrategy
    default_tools: list[str]
    git_user_name: str | None
    git_user_email: str | None
    secret_names: list[str]
    mcp_config: McpConfig = Field(default_factory=McpConfig)


class SecretName(BaseModel):
    name: str
    description: str | None = None


class SecretNames(BaseModel):
    secrets: list[SecretName]


@doc(
    summary="The current user and their settings (with expose_secrets=true and the session "
    "key of one of the user's live sandboxes: the LLM gateway and that sandbox's "
    "token)",
    query=MeQuery,
    response=UserInfo,
    errors=(403,),
)
async def me(request: Request) -> Response:
    account = await user(request)
    expose = read_query(request, MeQuery).expose_secrets
    svc = services(request)
    settings = await svc.settings.get(account.id)
    base_url, key = settings.llm_base_url, MASK if settings.llm_api_key else None
    if expose:
        sandbox = await by_session_key(request)
        if sandbox.user_id != account.id:
            audit.warning(
                "users/me: the session key of sandbox %s is not user %s's", sandbox.id, account.id
            )
            raise Forbidden("the session key does not belong to one of your sandboxes")
        audit.info(
            "users/me: the LLM gateway token of sandbox %s read by user %s", sandbox.id, account.id
        )
        access = svc.gateway.access(sandbox)
        await record(request, account, "llm_token.read", "sandbox", sandbox.id)
        base_url, key = access.base_url, access.api_key
    return reply(
        UserInfo(
            id=account.id,
            name=account.name,
            llm_model=settings.llm_model,
            llm_base_url=base_url,
            llm_api_key=key,
            grouping_strategy=settings.grouping_strategy,
            default_tools=list(settings.default_tools),
            git_user_name=settings.git_user_name,
            git_user_email=settings.git_user_email,
            secret_names=sorted(settings.secrets),
        )
    )


async def by_session_key(request: Request) -> SandboxRow:
    """The live sandbox (not ERROR or MISSING) whose session key the request carries;
    Unauthorized for no key, an unknown one or a dead sandbox's."""
    key = request.headers.get("x-session-api-key")
    if not key:
        raise Unauthorized("X-Session-API-Key is required")
    return await services(request).sandboxes.rows.by_session_key(key)


async def _sandbox(request: Request) -> SandboxRow:
    """The sandbox of the path, authenticated by its own session key (no account key)."""
    sandbox = await by_session_key(request)
    sandbox_id = path_id(request, "sandbox_id")
    if sandbox.id != sandbox_id:
        audit.warning("sandbox %s's session key was used for sandbox %s", sandbox.id, sandbox_id)
        raise Forbidden("the session key is not this sandbox's")
    return sandbox


@doc(
    summary="The names of the sandbox user's stored secrets (X-Session-API-Key of the "
    "sandbox; no values)",
    response=SecretNames,
    errors=(403,),
)
async def secret_names(request: Request) -> Response:
    sandbox = await _sandbox(request)
    settings = await services(request).settings.get(sandbox.user_id)
    return reply(SecretNames(secrets=[SecretName(name=n) for n in sorted(settings.secrets)]))


@doc(
    summary="One stored secret's value as text (X-Session-API-Key of the sandbox): what a "
    "LookupSecret inside the sandbox fetches",
    media={"text/plain": {"type": "string"}},
    errors=(403, 404),
)
async def secret_value(request: Request) -> Response:
    sandbox = await _sandbox(request)
    name = str(request.path_params["secret_name"])
    if not SECRET_NAME.match(name):
        raise invalid(
            ["path", "secret_name"],
            "not a secret name (letters, digits and _)",
            "string_pattern_mismatch",
            name,
        )
    settings = await services(request).settings.get(sandbox.user_id)
    if name not in settings.secrets:
        raise NotFound(f"no secret {name}")
    audit.info("secret %s read by sandbox %s of user %s", name, sandbox.id, sandbox.user_id)
    await record(
        request, by_sandbox(sandbox.id), "secret.read", "secret", name, user_id=sandbox.user_id
    )
    return Response(
        settings.secrets[name], media_type="text/plain", headers={"Cache-Control": "no-store"}
    )
