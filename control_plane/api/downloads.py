"""A workspace file as the control plane serves it: from the console's origin, so never as what
its name says it is. An `evil.html` or an `.svg` the agent wrote would otherwise run as a page
of the console, with the user's key in reach; it comes as an attachment, as plain text when it
is text (readable in place, never rendered) and as bytes otherwise. A refusal for a path outside
the workspace does not name where the workspace lies on the sandbox's host."""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from urllib.parse import quote

from starlette.responses import Response

from control_plane.agent_client import Raw

#: What a 403 of the agent server's file route says instead of its own words (they hold the
#: workspace's absolute path).
OUTSIDE = "the path is outside the conversation's working directory"
#: The same, for a path read in the sandbox's whole workspace (`scope=sandbox`).
OUTSIDE_SANDBOX = "the path is outside the sandbox's workspace"


def served(raw: Raw, path: str, outside: str = OUTSIDE) -> Response:
    if raw.status == 403:
        return Response(
            json.dumps({"detail": outside}), status_code=403, media_type="application/json"
        )
    if raw.status != 200:
        return Response(raw.content, status_code=raw.status, media_type=raw.media_type)
    try:
        raw.content.decode()
        media_type = "text/plain; charset=utf-8"
    except UnicodeDecodeError:
        media_type = "application/octet-stream"
    name = PurePosixPath(path).name or "file"
    return Response(
        raw.content,
        media_type=media_type,
        headers={"Content-Disposition": f"attachment; filename*=UTF-8''{quote(name)}"},
    )
