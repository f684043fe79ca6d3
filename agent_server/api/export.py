"""GET /api/conversations/{id}/download: the trajectory as a zip, streamed."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from agent_server.api.io import conversation
from agent_server.export import trajectory_zip
from web.io import doc


@doc(
    summary="The trajectory as a zip: events.jsonl (the events as stored) and meta.json "
    "(the conversation, without secrets or the LLM key)",
    errors=(404,),
)
async def download(request: Request) -> Response:
    conv = conversation(request)
    log = await conv.log()
    shown = conv.masker.data(conv.shown.info().model_dump(mode="json"))
    meta = json.dumps(shown, indent=1, sort_keys=True).encode()
    # A sync iterator: Starlette runs it in a worker thread, so log reads never block the loop.
    return StreamingResponse(
        trajectory_zip(meta, log, len(log)),
        media_type="application/zip",
        headers={"Content-Disposition": f'attachment; filename="conversation-{conv.id}.zip"'},
    )
