"""Routes about the control plane itself: liveness, readiness and the OpenAPI document (no key
needed). `/health` and `/alive` answer while the process serves; `/ready` only while its
database and its sandbox provider answer too (`control_plane.readiness`), else 503 naming the
part that failed and why."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import URLPath
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import Receive, Scope, Send

from control_plane import openapi, readiness
from control_plane.api.io import services
from web.errors import allowed


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def ready(request: Request) -> Response:
    svc = services(request)
    found = await readiness.check(svc.db, svc.provider)
    return JSONResponse(
        {
            "status": "ready" if found.ready else "not ready",
            "checks": {p.name: {"ok": p.ok, "detail": p.detail} for p in found.parts},
        },
        status_code=200 if found.ready else 503,
        headers={"Cache-Control": "no-store"},
    )


class Unserved(BaseRoute):
    """Under /api, after every route: a method the path does not serve is a 405 naming the ones
    it does (`web.errors.allowed`), an unknown path a 404; neither falls through to the
    console's files, whose own 405 would say GET, HEAD. Not a `Route`, so not counted among a
    path's methods."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        under = scope["type"] == "http" and str(scope["path"]).startswith("/api/")
        return (Match.FULL if under else Match.NONE), {}

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise HTTPException(405 if allowed(Request(scope)) else 404)


async def openapi_json(request: Request) -> Response:
    document = services(request).openapi
    if not document:  # the routes do not change while the control plane runs
        operator = bool(services(request).config.operator_key)
        document.update(openapi.build(request.app.routes, operator=operator))
    return JSONResponse(document)
