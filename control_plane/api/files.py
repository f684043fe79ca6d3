"""GET /api/v1/app-conversations/{id}/files?path=&scope=: a workspace directory's entries, read
through the sandbox (the console's file browser; a file itself is .../file, served by
`downloads`): of the conversation's directory, or with `scope=sandbox` of its sandbox's whole
workspace."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import Response

from control_plane.api.app_conversations import owned
from control_plane.api.downloads import OUTSIDE, OUTSIDE_SANDBOX
from control_plane.api.io import services
from web.io import doc

#: Where a path is read: the conversation's directory (its working directory), or the whole
#: workspace of its sandbox (every conversation's directory in it); either is confined by the
#: agent server, which refuses a path that leaves it (403).
Scope = Literal["conversation", "sandbox"]


class ListQuery(BaseModel):
    path: str | None = Field(default=None, min_length=1, max_length=4096)
    scope: Scope = "conversation"
    """`sandbox`: relative to the sandbox's workspace, not the conversation's directory."""


@doc(
    summary="A workspace directory's entries (directories first)",
    query=ListQuery,
    errors=(400, 403, 404, 409, 410, 502),
)
async def files(request: Request) -> Response:
    row, params = await owned(request, ListQuery)
    assert params is not None
    conversations = services(request).conversations
    where = {"path": params.path} if params.path else {}
    if params.scope == "sandbox":
        raw = await conversations.inspect_sandbox(row, "files", where)
    else:
        raw = await conversations.inspect(row, "files", where)
    if raw.status == 403:  # the agent server's words name the workspace's host path
        detail = OUTSIDE_SANDBOX if params.scope == "sandbox" else OUTSIDE
        return Response(
            json.dumps({"detail": detail}), status_code=403, media_type="application/json"
        )
    return Response(raw.content, status_code=raw.status, media_type=raw.media_type)
