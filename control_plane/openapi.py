"""The control plane's OpenAPI document: `web.openapi` over /api/v1 (the account key on every
route), with the event webhook under `webhooks` (SPEC 4.5, 9: interface version 0.0.1)."""

from __future__ import annotations

from typing import Any

from starlette.routing import BaseRoute, Route

from control_plane import __version__
from control_plane.api.paths import ID_PATTERN
from events.kinds import AnyEvent
from web import openapi
from web.io import Success

V1 = "/api/v1"
WEBHOOKS = V1 + "/webhooks"
#: The LLM gateway (`control_plane.gateway.GATEWAY_PATH`).
GATEWAY = V1 + "/llm"
#: The operator's routes: without CONTROL_PLANE_OPERATOR_KEY they do not exist (404).
ADMIN = V1 + "/admin/"


def _served(route: Route) -> bool:
    """/api/v1 and nothing else: the console's files, the webhook (under `webhooks`) and the
    LLM gateway (sandboxes' model clients speak their provider's API to it) are not
    operations of the interface."""
    return (
        route.path.startswith(V1)
        and not route.path.startswith(WEBHOOKS)
        and not route.path.startswith(GATEWAY + "/")
    )


def _bodies_optional(document: dict[str, Any]) -> dict[str, Any]:
    """Every body of /api/v1 is read by `control_plane.api.io.body`, which takes no body at
    all as the empty object (the app server's clients POST a start or a sandbox with none): so
    no body is required, and one left out is answered as `{}` would be (a 422 where `{}` is
    not enough)."""
    for operations in document["paths"].values():
        for operation in operations.values():
            if "requestBody" in operation:
                operation["requestBody"]["required"] = False
    return document


def build(routes: list[BaseRoute], operator: bool = True) -> dict[str, Any]:
    """`operator`: whether the operator's routes exist here (a key is set); without one they
    are left out, as the server answers them (a 404 with or without a key: schemathesis'
    ST203 found GET /api/v1/admin/audit without Authorization answered 404, not 401)."""
    document = _bodies_optional(_build(routes))
    if not operator:
        document["paths"] = {
            path: ops for path, ops in document["paths"].items() if not path.startswith(ADMIN)
        }
    return document


def _build(routes: list[BaseRoute]) -> dict[str, Any]:
    return openapi.build(
        routes,
        openapi.Service(
            title="control plane",
            version=__version__,
            description="Application interface (/api/v1) of the agent execution service.",
            security_schemes={
                "BearerAuth": {"type": "http", "scheme": "bearer"},
                "APIKeyHeader": {"type": "apiKey", "in": "header", "name": "X-Session-API-Key"},
            },
            guard=lambda path: "BearerAuth",
            include=_served,
            path_parameters={
                "conversation_id": {"type": "string", "format": "uuid"},
                "sandbox_id": {"type": "string", "pattern": ID_PATTERN},
            },
            webhooks={
                "events": openapi.Webhook(
                    summary="Events pushed by a sandbox's agent server",
                    operation_id="post_api_v1_webhooks_events_conversation_id",
                    body=list[AnyEvent],
                    response=Success,
                    security="APIKeyHeader",
                    errors={
                        401: "Missing or unknown session key",
                        413: "Batch too large",
                        429: "Past the intake's bounds; send the batch again",
                        503: "Not stored; send the batch again",
                    },
                )
            },
        ),
    )
