"""Routes about the control plane itself: liveness and the OpenAPI document (no key needed)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from control_plane import openapi
from control_plane.api.io import services


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def openapi_json(request: Request) -> Response:
    document = services(request).openapi
    if not document:  # the routes do not change while the control plane runs
        document.update(openapi.build(request.app.routes))
    return JSONResponse(document)
