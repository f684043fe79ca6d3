"""/api/v1/sandboxes and /api/v1/sandbox-specs (SPEC 4.3)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from control_plane.api.io import audit, body, from_browser, services, user
from control_plane.api.paths import MADE_ID, path_id
from control_plane.app_urls import WORKERS, AppLinks
from control_plane.crypto import token_sandbox
from control_plane.models import DiskUsage, SandboxReason, SandboxRow, SandboxStatus
from control_plane.network.policy import NetworkPolicy
from control_plane.sandboxes import names
from control_plane.services import Services
from web.errors import Unauthorized, invalid
from web.io import doc, located, read_query, reply


class ExposedUrl(BaseModel):
    name: str
    url: str
    port: int


class SandboxInfo(BaseModel):
    """SPEC 2.3: the key and the URLs are present only while RUNNING (and never to a browser:
    `io.from_browser`)."""

    id: str
    name: str
    """Its readable name ("brisk-otter-42"), unique among its user's sandboxes: what the
    console shows and confirms instead of the id (renamed by PATCH)."""
    created_by_user_id: str
    """The owner (the app server's name)."""
    status: SandboxStatus
    status_reason: SandboxReason | None
    """Why the status last changed: USER, IDLE, SESSION_CAP (the 12-hour cap), DELETION_TIME,
    VANISHED (MISSING: its process is gone), UNHEALTHY (ERROR: its health check failed past the
    grace period), START_FAILED."""
    status_detail: str | None
    """The same, in words."""
    sandbox_spec_id: str
    session_api_key: str | None
    exposed_urls: list[ExposedUrl] | None
    created_at: datetime
    last_activity_at: datetime
    conversation_count: int
    """Conversations attached to it."""
    pause_at: datetime | None
    """RUNNING: when it will be paused (idle time from its last activity, or the 12-hour cap)."""
    delete_at: datetime | None
    """PAUSED: when it will be deleted with its conversations (the deletion time)."""
    network_policy: NetworkPolicy
    """What it may connect to beyond its control plane (GET …/network: what it was refused)."""
    disk: DiskUsage | None = None
    """Its own filesystem's bytes used and limit (CONTROL_PLANE_SANDBOX_DISK_LIMIT); None where
    it shares its host's disk."""


class SandboxPage(BaseModel):
    items: list[SandboxInfo]
    next_page_id: str | None


class CreateSandbox(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sandbox_spec_id: str | None = Field(default=None, max_length=100)
    network_policy: NetworkPolicy | None = None
    """Its egress policy; default: the user's (settings' `network_policy`)."""


class SandboxPatch(BaseModel):
    """What to change; a field left out is kept."""

    model_config = ConfigDict(extra="forbid")

    network_policy: NetworkPolicy | None = None
    """Applied at once: new connections meet it, open ones go on."""
    name: Annotated[str, Field(pattern=names.NAME_PATTERN, max_length=names.MAX_LENGTH)] | None = (
        None
    )
    """A new readable name: letters, digits, spaces, `.`, `-` and `_`, starting and ending
    with a letter or a digit; 409 when another of the user's sandboxes has it."""


class RefusalInfo(BaseModel):
    address: str
    protocol: str
    port: int
    seconds_ago: int


class NetworkState(BaseModel):
    """What the sandbox may reach, and what its policy refused it."""

    policy: NetworkPolicy
    enforced: bool
    """Whether a network boundary holds it to its policy (false: its provider shares the
    host's network, or it is not running)."""
    refused: int | None
    """Connections (and datagrams) its policy refused while it ran; null where nothing
    enforces it."""
    recent: list[RefusalInfo]
    """The destinations refused in the last ten minutes, the latest first."""


class SandboxSearch(BaseModel):
    limit: int = Field(default=100, ge=1, le=100)
    page_id: str | None = Field(default=None, pattern=r"^[0-9]{1,9}$")
    """Opaque: the next_page_id of the previous page."""
    status: SandboxStatus | None = None


class SandboxIds(BaseModel):
    id: list[Annotated[str, Field(pattern=MADE_ID)]] = Field(min_length=1, max_length=100)


class DeleteQuery(BaseModel):
    sandbox_id: str = Field(min_length=1, max_length=64)


class SandboxSpecInfo(BaseModel):
    id: str
    description: str
    working_dir: str | None = None
    """The workspace as a sandbox's processes see it (the app server's field); null when it
    differs from one sandbox to the next (process sandboxes without isolation)."""


class SpecPage(BaseModel):
    items: list[SandboxSpecInfo]
    next_page_id: str | None = None


class SpecSearch(BaseModel):
    limit: int = Field(default=100, ge=1, le=100)
    page_id: str | None = Field(default=None, pattern=r"^[0-9]{1,9}$")
    """Accepted for symmetry with other searches; the specs fit on one page."""


class Deleted(BaseModel):
    success: bool = True


async def infos(request: Request, found: list[SandboxRow]) -> list[SandboxInfo]:
    """A browser (`io.from_browser`) is given neither the key nor the addresses."""
    svc = services(request)
    counts = await svc.sandboxes.conversation_counts([r.id for r in found])
    out = []
    for row in found:
        running = row.status is SandboxStatus.RUNNING and not from_browser(request)
        url = svc.sandboxes.url(row) if running else None
        pause_at, delete_at = svc.lifecycle.deadlines(row)
        out.append(
            SandboxInfo(
                id=row.id,
                name=row.name,
                created_by_user_id=row.user_id,
                status=row.status,
                status_reason=row.status_reason,
                status_detail=row.status_detail,
                sandbox_spec_id=row.spec_id,
                session_api_key=svc.sandboxes.session_key(row) if running else None,
                exposed_urls=[
                    ExposedUrl(name="AGENT_SERVER", url=url, port=row.port or 0),
                    *_workers(request, svc, row),
                ]
                if url
                else None,
                created_at=row.created_at,
                last_activity_at=row.last_activity_at,
                conversation_count=counts[row.id],
                pause_at=pause_at,
                delete_at=delete_at,
                network_policy=row.network,
                disk=svc.sandboxes.disk(row),
            )
        )
    return out


def _workers(request: Request, svc: Services, row: SandboxRow) -> list[ExposedUrl]:
    """WORKER_1 and WORKER_2 (the app server's names): links to the web apps the sandbox may
    serve on those ports, through this control plane (`control_plane.app_urls`: each is a
    capability of the owner's, for an hour); none where its ports cannot be reached."""
    if svc.sandboxes.app_host(row) is None:
        return []
    links, now = AppLinks(svc.sandboxes.cipher), svc.db.now()
    origin = str(request.base_url).rstrip("/")
    return [
        ExposedUrl(name=name, url=origin + links.mint(row.user_id, row.id, port, now)[0], port=port)
        for name, port in WORKERS
    ]


async def info(request: Request, row: SandboxRow) -> SandboxInfo:
    return (await infos(request, [row]))[0]


async def owned(
    request: Request, validate: type[BaseModel] | None = None
) -> tuple[Services, SandboxRow]:
    """Auth, then input validation (422), then ownership (404)."""
    account = await user(request)
    sandbox_id = path_id(request, "sandbox_id")
    if validate is not None:
        read_query(request, validate)
    svc = services(request)
    return svc, await svc.sandboxes.owned(sandbox_id, account.id)


@doc(
    summary="Create a sandbox; poll GET /api/v1/sandboxes?id= until RUNNING",
    body=CreateSandbox,
    response=SandboxInfo,
    status=201,
    errors=(429,),
)
async def create(request: Request) -> Response:
    account = await user(request)
    asked = await body(request, CreateSandbox)
    svc = services(request)
    network = asked.network_policy or (await svc.settings.get(account.id)).network_policy
    with located("body"):
        row = await svc.sandboxes.create(account.id, asked.sandbox_spec_id, network)
    await audit(
        request,
        account,
        "sandbox.create",
        "sandbox",
        row.id,
        details={"spec": row.spec_id, "network_policy": network.model_dump(mode="json")},
    )
    return reply(await info(request, row), 201)


@doc(
    summary="Rename the sandbox, or change its network policy (at once: new connections meet it)",
    body=SandboxPatch,
    response=SandboxInfo,
    errors=(404, 409, 410, 503),
)
async def patch(request: Request) -> Response:
    svc, row = await owned(request)
    asked = await body(request, SandboxPatch)
    changed = row
    if asked.network_policy is not None:  # first: refused for an ended sandbox
        changed = await svc.egress.change(changed, asked.network_policy)
        await audit(
            request,
            row.user_id,
            "sandbox.network_policy",
            "sandbox",
            row.id,
            user_id=row.user_id,
            details={"network_policy": asked.network_policy.model_dump(mode="json")},
        )
    if asked.name is not None and asked.name != row.name:  # for people: not audited
        changed = await svc.sandboxes.rename(changed, asked.name)
    return reply(await info(request, changed))


@doc(
    summary="What the sandbox may reach and what its policy refused it (its owner's key, or "
    "the sandbox's own token)",
    response=NetworkState,
    errors=(404,),
)
async def network(request: Request) -> Response:
    svc = services(request)
    row = await _by_token(request) or (await owned(request))[1]
    state = await svc.egress.state(row)
    return reply(
        NetworkState(
            policy=state.policy,
            enforced=state.enforced,
            refused=state.refused,
            recent=[RefusalInfo(**vars(r)) for r in state.recent],
        )
    )


async def _by_token(request: Request) -> SandboxRow | None:
    """The sandbox of the path, when the request carries that sandbox's own token (what its
    agent server asks with); None for any other credential (an account key is tried next)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or token_sandbox(token) is None:
        return None
    row = await services(request).egress.by_token(path_id(request, "sandbox_id"), token)
    if row is None:
        raise Unauthorized("not this sandbox's token", scheme="Bearer")
    return row


@doc(summary="The user's sandboxes, newest first", query=SandboxSearch, response=SandboxPage)
async def search(request: Request) -> Response:
    account = await user(request)
    params = read_query(request, SandboxSearch)
    offset = int(params.page_id or 0)
    found = await services(request).sandboxes.search(
        account.id, params.status, limit=params.limit + 1, offset=offset
    )
    following = str(offset + params.limit) if len(found) > params.limit else None
    return reply(
        SandboxPage(items=await infos(request, found[: params.limit]), next_page_id=following)
    )


@doc(
    summary="Sandboxes by id (null for ids that are unknown or not the user's)",
    query=SandboxIds,
    response=list[SandboxInfo | None],
)
async def batch_get(request: Request) -> Response:
    account = await user(request)
    ids = read_query(request, SandboxIds).id
    found = await services(request).sandboxes.owned_many(ids, account.id)
    known = dict(zip(found, await infos(request, list(found.values()))))
    return reply([known.get(i) for i in ids])


class Changed(SandboxInfo):
    """The sandbox as a pause or a resume left it, and the app server's `success`."""

    success: bool = True


@doc(
    summary="Pause (SIGSTOP): conversations and workspace kept, CPU released",
    response=Changed,
    errors=(404, 409, 410),
)
async def pause(request: Request) -> Response:
    svc, row = await owned(request)
    paused = await svc.sandboxes.pause(row)
    if paused.status is not row.status:  # (not when it was PAUSED already)
        await audit(request, row.user_id, "sandbox.pause", "sandbox", row.id, user_id=row.user_id)
    changed = await info(request, paused)
    return reply(Changed(**changed.model_dump()))


@doc(summary="Resume a paused sandbox", response=Changed, errors=(404, 409, 410))
async def resume(request: Request) -> Response:
    svc, row = await owned(request)
    resumed = await svc.sandboxes.resume(row)
    if resumed.status is not row.status:  # (not when it was RUNNING already)
        await audit(request, row.user_id, "sandbox.resume", "sandbox", row.id, user_id=row.user_id)
    changed = await info(request, resumed)
    return reply(Changed(**changed.model_dump()))


@doc(
    summary="Delete; the query parameter sandbox_id must repeat the path value",
    query=DeleteQuery,
    response=Deleted,
    errors=(404,),
)
async def delete(request: Request) -> Response:
    svc, row = await owned(request, DeleteQuery)
    confirm = read_query(request, DeleteQuery).sandbox_id
    if confirm != row.id:
        raise invalid(
            ["query", "sandbox_id"],
            "sandbox_id must equal the sandbox id of the path",
            input_=confirm,
        )
    await svc.sandboxes.destroy(row)
    if row.status is not SandboxStatus.MISSING:  # (not a deleted one's remains)
        await audit(request, row.user_id, "sandbox.delete", "sandbox", row.id, user_id=row.user_id)
    return reply(Deleted())


@doc(
    summary="The sandbox specs (templates) of this installation",
    query=SpecSearch,
    response=SpecPage,
)
async def specs(request: Request) -> Response:
    await user(request)
    read_query(request, SpecSearch)
    return reply(
        SpecPage(
            items=[
                SandboxSpecInfo(id=s.id, description=s.description, working_dir=s.working_dir)
                for s in services(request).provider.specs()
            ]
        )
    )


#: How long before its pause a sandbox's idle status warns (the frontend shows a banner).
WARNING_SECONDS = 60.0


class IdleStatus(BaseModel):
    """The app server's idle-timeout view of one sandbox (times in seconds)."""

    idle_seconds: float
    """Since its last activity."""
    timeout_seconds: float | None
    """The idle time after which a RUNNING sandbox is paused (null: never)."""
    warning_seconds: float
    is_warning: bool
    """RUNNING, and paused within `warning_seconds`."""
    remaining_seconds: float | None
    """Until it is paused (the idle time or the 12-hour cap, whichever comes first); null when
    it is not RUNNING or nothing will pause it."""


@doc(
    summary="How long the sandbox has been idle and when it will be paused",
    response=IdleStatus,
    errors=(404,),
)
async def idle_status(request: Request) -> Response:
    svc, row = await owned(request)
    now = svc.db.now()
    pause_at, _ = svc.lifecycle.deadlines(row)
    remaining = None if pause_at is None else max((pause_at - now).total_seconds(), 0.0)
    idle = svc.config.idle_seconds
    return reply(
        IdleStatus(
            idle_seconds=max((now - row.last_activity_at).total_seconds(), 0.0),
            timeout_seconds=idle,
            warning_seconds=WARNING_SECONDS,
            is_warning=remaining is not None and remaining <= WARNING_SECONDS,
            remaining_seconds=remaining,
        )
    )
