"""`GET /metrics`: the control plane's metrics for an operator's Prometheus (the operator key,
`io.operator`; not a user's). What the database counts is read for each scrape
(`Services.figures`), so every control plane on one database shows the same sandboxes."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from control_plane.api.io import operator, services
from control_plane.telemetry.metrics import CONTENT_TYPE


async def scrape(request: Request) -> Response:
    operator(request)
    svc = services(request)
    return Response(svc.telemetry.metrics.scrape(await svc.figures()), media_type=CONTENT_TYPE)
