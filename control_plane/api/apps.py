"""The web apps a sandbox serves on its ports: `GET /api/v1/sandboxes/{id}/app-url?port=` mints
a link for the owner's key, and `/sandbox-apps/{id}/{port}/{capability}/…` proxies it to that
port of the sandbox's own address (`control_plane.app_urls` says why it is built so)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from datetime import datetime

import httpx
from pydantic import BaseModel, Field
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from control_plane import app_urls
from control_plane.api.io import services
from control_plane.api.sandboxes import owned
from control_plane.app_urls import AppLinks
from control_plane.models import SandboxRow, SandboxStatus, ensure_usable
from control_plane.services import Services
from web.errors import Conflict, invalid
from web.io import doc, read_query, reply

logger = logging.getLogger(__name__)

#: Seconds an app's answer may take to start, and to connect.
TIMEOUT = httpx.Timeout(30.0, connect=5.0)
#: Seconds between two activity marks of one sandbox by its app's requests (a page's assets
#: come in bursts: one write to the database for them).
TOUCH_EVERY = 30.0
_touched: dict[str, float] = {}


class AppUrlQuery(BaseModel):
    port: int = Field(ge=app_urls.MIN_PORT, le=app_urls.MAX_PORT)
    """The port the app listens on inside the sandbox (not its agent server's)."""


class AppUrl(BaseModel):
    """A link to the web app the sandbox serves on `port`, for a browser (an iframe, a tab)."""

    port: int
    url: str
    """Absolute; it is the credential: it opens this port of this sandbox, and nothing
    else, until `expires_at`, while the sandbox is its owner's and running."""
    path: str
    """The same link without the origin (the console's own)."""
    expires_at: datetime


def link(svc: Services, row: SandboxRow, port: int, origin: str) -> AppUrl:
    path, expires = AppLinks(svc.sandboxes.cipher).mint(row.user_id, row.id, port, svc.db.now())
    return AppUrl(port=port, url=origin.rstrip("/") + path, path=path, expires_at=expires)


@doc(
    summary="A link to the web app the sandbox serves on a port (its dev server), for a browser",
    query=AppUrlQuery,
    response=AppUrl,
    errors=(404, 409, 410),
)
async def app_url(request: Request) -> Response:
    svc, row = await owned(request, AppUrlQuery)
    port = read_query(request, AppUrlQuery).port
    ensure_usable(row.id, row.status, "its apps are not served")
    if row.status is SandboxStatus.PAUSED:  # SPEC 3.1: the next access resumes it
        row = await svc.sandboxes.resume(row)
    if row.status is not SandboxStatus.RUNNING:
        raise Conflict(f"sandbox {row.id} is {row.status.value}: its apps are not served yet")
    if svc.sandboxes.app_host(row) is None:
        raise Conflict(
            "this sandbox has no network address of its own (it shares its host's network, or "
            "its kind publishes only its agent server): its apps cannot be opened"
        )
    if not app_urls.valid_port(port, row.port):
        raise invalid(["query", "port"], "that is the sandbox's agent server, not an app", "port")
    return reply(link(svc, row, port, str(request.base_url)))


async def proxy(request: Request) -> Response:
    """`/sandbox-apps/{sandbox id}/{port}/{capability}/{the app's path}`: the app's answer, or
    a refusal in words; never a 500 for anything a request holds."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    parts = raw.decode("latin-1").split("/", 5)  # "", "sandbox-apps", id, port, cap, rest
    if len(parts) < 5 or not parts[3].isdigit() or len(parts[3]) > 5:
        return _said(404, "No such app.")
    sandbox_id, port, capability = parts[2], int(parts[3]), parts[4]
    if len(parts) == 5:  # the link without its slash: relative links would miss the prefix
        return _said(308, "", {"location": f"{app_urls.base_path(sandbox_id, port, capability)}/"})
    svc = services(request)
    row = await svc.sandboxes.rows.get(sandbox_id) if len(sandbox_id) <= 64 else None
    now = svc.db.now()
    if row is None or not AppLinks(svc.sandboxes.cipher).check(
        capability, row.user_id, row.id, port, now
    ):
        return _said(
            403,
            "This link does not open an app (it expired, or is not yours): open "
            "the app again from the console.",
        )
    host = svc.sandboxes.app_host(row)
    if row.status is not SandboxStatus.RUNNING or host is None:
        gone = row.status is SandboxStatus.MISSING
        return _said(
            410 if gone else 409,
            f"The sandbox is {row.status.value.lower()}: its apps are not served.",
        )
    if not app_urls.valid_port(port, row.port):
        return _said(403, "That port is not an app's.")
    base = app_urls.base_path(row.id, port, capability)
    if request.method == "OPTIONS" and "access-control-request-method" in request.headers:
        return _preflight()
    body = await _body(request, svc.config.max_body_bytes)
    if body is None:
        return _said(413, "The request is too large for the app.")
    await _touch(svc, row.id)
    target = httpx.URL(scheme="http", host=host, port=port, path="/").copy_with(
        raw_path=("/" + parts[5]).encode("latin-1")
        + (b"?" + request.scope["query_string"] if request.scope.get("query_string") else b"")
    )
    assert target.host == host and target.port == port  # noqa: S101 (the target is ours alone)
    client = httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False, trust_env=False)
    try:
        sent = client.build_request(
            request.method,
            target,
            headers=app_urls.request_headers(request.headers.items()),
            content=body,
        )
        answer = await client.send(sent, stream=True)
    except httpx.HTTPError as exc:
        await client.aclose()
        logger.info("app %s:%s of sandbox %s: %s", host, port, row.id, exc)
        return _said(
            502,
            f"Nothing answers on port {port} of the sandbox (yet): is the app "
            "running there, listening on all addresses (0.0.0.0)?",
        )

    async def close() -> None:
        await answer.aclose()
        await client.aclose()

    headers = app_urls.response_headers(answer.headers.multi_items(), base, host, port)
    return StreamingResponse(
        _chunks(answer),
        status_code=answer.status_code,
        headers=_merged(headers),
        background=BackgroundTask(close),
    )


async def _chunks(answer: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in answer.aiter_raw():
            yield chunk
    except httpx.HTTPError:
        return  # the app went away mid-answer: the browser sees it cut short


async def _body(request: Request, limit: int) -> bytes | None:
    """The request's body, None past `limit` bytes."""
    received = bytearray()
    async for chunk in request.stream():
        received += chunk
        if len(received) > limit:
            return None
    return bytes(received)


async def _touch(svc: Services, sandbox_id: str) -> None:
    """Using its app is activity: its idle pause moves later (at most one write a while)."""
    now = time.monotonic()
    if now - _touched.get(sandbox_id, -TOUCH_EVERY) < TOUCH_EVERY:
        return
    _touched[sandbox_id] = now
    if len(_touched) > 10_000:
        _touched.clear()
    async with svc.db.begin() as conn:
        await svc.sandboxes.rows.touch(conn, sandbox_id, only_running=True)


def _merged(headers: list[tuple[str, str]]) -> dict[str, str]:
    ours = dict(app_urls.security_headers())
    return {**{n: v for n, v in headers if n not in ours}, **ours}


def _said(status: int, text: str, extra: dict[str, str] | None = None) -> Response:
    return Response(
        text + ("\n" if text else ""),
        status_code=status,
        media_type="text/plain; charset=utf-8",
        headers={**dict(app_urls.security_headers()), **(extra or {})},
    )


def _preflight() -> Response:
    """A CORS preflight of the app's own page (an opaque origin asks before a JSON POST)."""
    return Response(
        status_code=204,
        headers={
            **dict(app_urls.security_headers()),
            "access-control-allow-methods": "GET, HEAD, POST, PUT, PATCH, DELETE",
            "access-control-allow-headers": ", ".join(sorted(app_urls.REQUEST_HEADERS)),
            "access-control-max-age": "600",
        },
    )
