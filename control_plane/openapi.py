"""The OpenAPI 3.1.0 document of /api/v1, built from the route table, with the event webhook
under `webhooks` (SPEC 4.5, 9: interface version 0.0.1)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import TypeAdapter
from starlette.routing import BaseRoute, Route

from control_plane import __version__
from control_plane.errors import ErrorDetail, HTTPValidationError

REF = "#/components/schemas/{model}"


class _Schemas:
    def __init__(self) -> None:
        self.components: dict[str, Any] = {}

    def ref(self, annotation: Any) -> dict[str, Any]:
        schema = TypeAdapter(annotation).json_schema(ref_template=REF)
        self.components.update(schema.pop("$defs", {}))
        return schema

    def parameters(self, model: Any) -> list[dict[str, Any]]:
        schema = self.ref(model)
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        return [{"name": name, "in": "query", "required": name in required, "schema": prop}
                for name, prop in props.items()]


def _error(schemas: _Schemas, text: str) -> dict[str, Any]:
    return {"description": text,
            "content": {"application/json": {"schema": schemas.ref(ErrorDetail)}}}


def _validation(schemas: _Schemas) -> dict[str, Any]:
    return {"description": "Validation Error",
            "content": {"application/json": {"schema": schemas.ref(HTTPValidationError)}}}


def _operation(route: Route, method: str, schemas: _Schemas) -> dict[str, Any]:
    meta: dict[str, Any] = getattr(route.endpoint, "__openapi__", {})
    op: dict[str, Any] = {
        "summary": meta.get("summary", route.name),
        "operationId": method + re.sub(r"[^A-Za-z0-9]+", "_", route.path).rstrip("_"),
        "responses": {},
    }
    params = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
              for name in re.findall(r"{(\w+)", route.path)]
    if meta.get("query") is not None:
        params += schemas.parameters(meta["query"])
    if params:
        op["parameters"] = params
    if meta.get("body") is not None:
        op["requestBody"] = {"required": True,
                             "content": {"application/json": {"schema": schemas.ref(meta["body"])}}}
    ok: dict[str, Any] = {"description": "OK"}
    if meta.get("response") is not None:
        ok["content"] = {"application/json": {"schema": schemas.ref(meta["response"])}}
    op["responses"][str(meta.get("status", 200))] = ok
    op["security"] = [{"BearerAuth": []}]
    op["responses"]["401"] = _error(schemas, "Missing or unknown API key")
    op["responses"]["422"] = _validation(schemas)
    for code in meta.get("errors", ()):
        op["responses"][str(code)] = _error(schemas, {404: "Not found", 409: "Conflict",
                                                      410: "Gone", 502: "Sandbox failed"}
                                            .get(code, "Error"))
    return op


def _webhook(schemas: _Schemas) -> dict[str, Any]:
    from agent_server.events.kinds import AnyEvent

    return {"post": {
        "summary": "Events pushed by a sandbox's agent server",
        "operationId": "post_api_v1_webhooks_events_conversation_id",
        "parameters": [{"name": "conversation_id", "in": "path", "required": True,
                        "schema": {"type": "string", "format": "uuid"}}],
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": schemas.ref(list[AnyEvent])}}},
        "responses": {
            "200": {"description": "Stored (a replayed batch changes nothing)",
                    "content": {"application/json": {"schema": {
                        "type": "object",
                        "properties": {"success": {"type": "boolean", "default": True}}}}}},
            "401": _error(schemas, "Missing or unknown session key"),
            "422": _validation(schemas),
            "503": _error(schemas, "Not stored; send the batch again"),
        },
        "security": [{"APIKeyHeader": []}],
    }}


def build(routes: list[BaseRoute]) -> dict[str, Any]:
    schemas = _Schemas()
    paths: dict[str, Any] = {}
    for route in routes:
        if not isinstance(route, Route) or not route.path.startswith("/api/v1") \
                or route.path.startswith("/api/v1/webhooks"):
            continue
        for method in sorted((route.methods or set()) - {"HEAD"}):
            paths.setdefault(route.path, {})[method.lower()] = _operation(route, method.lower(), schemas)
    webhooks = {"events": _webhook(schemas)}
    return {
        "openapi": "3.1.0",
        "info": {"title": "control plane", "version": __version__,
                 "description": "Application interface (/api/v1) of the agent execution service."},
        "paths": paths,
        "webhooks": webhooks,
        "components": {
            "schemas": schemas.components,
            "securitySchemes": {
                "BearerAuth": {"type": "http", "scheme": "bearer"},
                "APIKeyHeader": {"type": "apiKey", "in": "header", "name": "X-Session-API-Key"},
            },
        },
    }


_built: dict[int, dict[str, Any]] = {}


def cached(routes: list[BaseRoute]) -> dict[str, Any]:
    """Built once per route table: the event schema alone is large."""
    key = id(routes)
    if key not in _built:
        _built[key] = build(routes)
    return _built[key]
