"""The OpenAPI 3.1.0 document, built from the route table and the models the routes name."""

from __future__ import annotations

import re
from typing import Any

from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute

from agent_server import __version__
from agent_server.auth import HEADER
from agent_server.errors import ErrorDetail, HTTPValidationError
from agent_server.events.kinds import AnyEvent
from agent_server.api.schemas import Success

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
        if "$ref" in schema:  # a model referenced rather than inlined
            props = self.components[schema["$ref"].split("/")[-1]].get("properties", {})
        required = set(schema.get("required", []))
        return [
            {"name": name, "in": "query", "required": name in required, "schema": prop}
            for name, prop in props.items()
        ]


def _operation(route: Route, method: str, schemas: _Schemas) -> dict[str, Any]:
    meta = getattr(route.endpoint, "__openapi__", {})
    op: dict[str, Any] = {
        "summary": meta.get("summary", route.name),
        "operationId": method + re.sub(r"[^A-Za-z0-9]+", "_", route.path).rstrip("_"),
        "responses": {},
    }
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"{(\w+)", route.path)
    ]
    if meta.get("query") is not None:
        params += schemas.parameters(meta["query"])
    if params:
        op["parameters"] = params
    if meta.get("body") is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": schemas.ref(meta["body"])}},
        }
    ok: dict[str, Any] = {"description": "OK"}
    if meta.get("response") is not None:
        ok["content"] = {"application/json": {"schema": schemas.ref(meta["response"])}}
    op["responses"][str(meta.get("status", 200))] = ok
    if route.path.startswith("/api"):
        op["security"] = [{"APIKeyHeader": []}]
        op["responses"]["401"] = _error(schemas, "Missing or wrong session key")
    if meta.get("query") is not None or meta.get("body") is not None or "{" in route.path:
        op["responses"]["422"] = {
            "description": "Validation Error",
            "content": {"application/json": {"schema": schemas.ref(HTTPValidationError)}},
        }
    for code in meta.get("errors", ()):
        op["responses"][str(code)] = _error(schemas, "Not found" if code == 404 else "Error")
    return op


def _error(schemas: _Schemas, text: str) -> dict[str, Any]:
    return {"description": text,
            "content": {"application/json": {"schema": schemas.ref(ErrorDetail)}}}


def _webhook(schemas: _Schemas) -> dict[str, Any]:
    """SPEC 4.5: what this server POSTs to the control plane."""
    return {
        "post": {
            "summary": "Receive a batch of events: POST {webhook_url}/events/{conversation_id}",
            "operationId": "on_events",
            "parameters": [{"name": "conversation_id", "in": "path", "required": True,
                            "schema": {"type": "string", "format": "uuid"}}],
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": schemas.ref(list[AnyEvent])}}},
            "responses": {
                "200": {"description": "Accepted",
                        "content": {"application/json": {"schema": schemas.ref(Success)}}},
                "422": {"description": "Validation Error", "content": {"application/json": {
                    "schema": schemas.ref(HTTPValidationError)}}},
            },
            "security": [{"APIKeyHeader": []}],
        }
    }


def document(app: Starlette) -> dict[str, Any]:
    """Built once per app (the routes do not change while it runs)."""
    cached = getattr(app.state, "openapi", None)
    if cached is None:
        cached = app.state.openapi = build(app.routes)
    return cached


def build(routes: list[Any]) -> dict[str, Any]:
    schemas = _Schemas()
    paths: dict[str, Any] = {}
    for route in routes:
        if isinstance(route, WebSocketRoute) or not isinstance(route, Route):
            continue
        item = paths.setdefault(route.path, {})
        for method in sorted(route.methods or ()):
            if method != "HEAD":
                item[method.lower()] = _operation(route, method.lower(), schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "agent-server", "version": __version__},
        "paths": paths,
        "webhooks": {"events": _webhook(schemas)},
        "components": {
            "schemas": schemas.components,
            "securitySchemes": {"APIKeyHeader": {"type": "apiKey", "in": "header", "name": HEADER}},
        },
    }
