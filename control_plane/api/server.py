"""Routes about the control plane itself: liveness and the OpenAPI document (no key needed)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from control_plane import openapi


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def openapi_json(request: Request) -> Response:
    return JSONResponse(openapi.cached(request.app.routes))
