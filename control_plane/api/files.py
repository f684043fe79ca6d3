"""GET /api/v1/app-conversations/{id}/files?path=: a workspace directory's entries, read through
the sandbox (the console's file browser; a file itself is .../file, served by `downloads`)."""

from __future__ import annotations

import json

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import Response

from control_plane.api.app_conversations import owned
from control_plane.api.downloads import OUTSIDE
from control_plane.api.io import services
from web.io import doc


class ListQuery(BaseModel):
    path: str | None = Field(default=None, min_length=1, max_length=4096)


@doc(
    summary="A workspace directory's entries (directories first)",
    query=ListQuery,
    errors=(400, 403, 404, 409, 410, 502),
)
async def files(request: Request) -> Response:
    row, params = await owned(request, ListQuery)
    assert params is not None
    raw = await services(request).conversations.inspect(
        row, "files", {"path": params.path} if params.path else {}
    )
    if raw.status == 403:  # the agent server's words name the workspace's host path
        return Response(
            json.dumps({"detail": OUTSIDE}), status_code=403, media_type="application/json"
        )
    return Response(raw.content, status_code=raw.status, media_type=raw.media_type)
