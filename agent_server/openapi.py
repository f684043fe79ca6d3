"""The OpenAPI 3.1.0 document, built from the route table and the models the routes name.

It says what the server does, no more and no less: request bodies are described as they are
validated (strictly: `0` is no boolean), responses as they are serialized (the settings'
`api_key` comes back masked, so it is no writeOnly field there), every success status and
media type a route answers with, and the rules the server enforces (name patterns, URL
schemes) as patterns. The fuzz (tests/test_fuzz.py) holds the server to it.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute

import tools as toolsets
from agent_server import __version__
from agent_server.agent.toolbox import ALIASES
from agent_server.api.schemas import Success
from agent_server.auth import HEADER
from agent_server.errors import ErrorDetail, HTTPValidationError
from agent_server.events.kinds import AnyEvent
from core.ids import EVENT_ID_PATTERN

REF = "#/components/schemas/{model}"
Mode = Literal["validation", "serialization"]
PATH_PARAMETERS = {
    "conversation_id": {"type": "string", "format": "uuid"},
    "event_id": {"type": "string", "pattern": f"^{EVENT_ID_PATTERN}$"},
}


class _Schemas:
    """Collects every annotation first, then generates them together, so a model used both
    ways gets two components when its two forms differ (`LLMConfig-Input`, `-Output`)."""

    def __init__(self) -> None:
        self._inputs: list[tuple[int, Mode, TypeAdapter[Any]]] = []
        self._keys: dict[tuple[int, Mode], int] = {}
        self.components: dict[str, Any] = {}
        self._made: dict[tuple[int, Mode], dict[str, Any]] = {}

    def ask(self, annotation: Any, mode: Mode) -> tuple[int, Mode]:
        key = (id(annotation), mode)
        if key not in self._keys:
            self._keys[key] = len(self._inputs)
            self._inputs.append((len(self._inputs), mode, TypeAdapter(annotation)))
        return self._keys[key], mode

    def generate(self) -> None:
        made, defs = TypeAdapter.json_schemas(self._inputs, ref_template=REF)
        self._made = {key: _names_checked(schema) for key, schema in made.items()}
        self.components = {name: _names_checked(schema)
                           for name, schema in defs.get("$defs", {}).items()}
        for name in list(self.components):
            if name.split("-")[0] == "ToolSpec":
                self.components[name] = self._tool_spec(self.components[name])

    def _tool_spec(self, schema: dict[str, Any]) -> dict[str, Any]:
        """A tool, as check_tool_names accepts it: a known name (or an alias of one) and the
        params its tool set takes."""
        names: dict[str, list[str]] = {name: [name] for name in toolsets.TOOL_SETS}
        for alias, name in ALIASES.items():
            names.setdefault(name, [name]).append(alias)
        variants = []
        for name, spellings in sorted(names.items()):
            toolset = toolsets.TOOL_SETS.get(name)
            params: dict[str, Any] = {"type": "object"}
            if toolset is not None and toolset.params_model is not None:
                params = TypeAdapter(toolset.params_model()).json_schema(ref_template=REF)
                self.components.update(params.pop("$defs", {}))
                # Keys with a leading `_` are the caller's notes, left out (tools.base.params_as).
                params.setdefault("patternProperties", {})["^_"] = {}
            variants.append({"type": "object", "required": ["name"], "properties": {
                "name": {"enum": sorted(spellings)}, "params": params}})
        return {"title": schema.get("title", "ToolSpec"), "oneOf": variants}

    def get(self, key: tuple[int, Mode]) -> dict[str, Any]:
        return self._made[key]


def _names_checked(node: Any) -> Any:
    """pydantic writes a dict with constrained keys as `patternProperties`, which lets any other
    key through; the server refuses them: `propertyNames` says so."""
    if isinstance(node, dict):
        node = {k: _names_checked(v) for k, v in node.items()}
        patterns = node.get("patternProperties")
        if isinstance(patterns, dict) and len(patterns) == 1 and "properties" not in node:
            ((pattern, values),) = patterns.items()
            del node["patternProperties"]
            node["propertyNames"] = {"pattern": pattern}
            node["additionalProperties"] = values
        return node
    if isinstance(node, list):
        return [_names_checked(v) for v in node]
    return node


class _Operation:
    """One method of one route, its schemas asked for up front."""

    def __init__(self, route: Route, method: str, schemas: _Schemas,
                 guarded: tuple[str, ...]) -> None:
        self.route, self.method = route, method
        self.guarded = route.path.startswith(guarded)
        self.meta: dict[str, Any] = getattr(route.endpoint, "__openapi__", {})
        ask = schemas.ask
        self.query = ask(self.meta["query"], "validation") if self.meta.get("query") else None
        self.body = ask(self.meta["body"], "validation") if self.meta.get("body") else None
        response = self.meta.get("response")
        self.response = ask(response, "serialization") if response is not None else None
        self.validation = ask(HTTPValidationError, "serialization")
        self.error = ask(ErrorDetail, "serialization")

    def build(self, schemas: _Schemas) -> dict[str, Any]:
        route, meta = self.route, self.meta
        op: dict[str, Any] = {
            "summary": meta.get("summary", route.name),
            "operationId": self.method + re.sub(r"[^A-Za-z0-9]+", "_", route.path).rstrip("_"),
            "responses": {},
        }
        params = [
            {"name": name, "in": "path", "required": True,
             "schema": PATH_PARAMETERS.get(name, {"type": "string"})}
            for name in re.findall(r"{(\w+)", route.path)
        ]
        if self.query is not None:
            params += _parameters(schemas.get(self.query), schemas.components)
        if params:
            op["parameters"] = params
        if self.body is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": schemas.get(self.body)}},
            }
        content: dict[str, Any] = {}
        if self.response is not None:
            content["application/json"] = {"schema": schemas.get(self.response)}
        content.update({media: {"schema": schema} for media, schema in meta["media"].items()}
                       if meta.get("media") else {})
        ok: dict[str, Any] = {"description": "OK"}
        if content:
            ok["content"] = content
        op["responses"][str(meta.get("status", 200))] = ok
        for code, text in (meta.get("also") or {}).items():
            op["responses"][str(code)] = {**ok, "description": text}
        if self.guarded:
            op["security"] = [{"APIKeyHeader": []}]
            op["responses"]["401"] = self._error(schemas, "Missing or wrong session key")
        if self.query is not None or self.body is not None or "{" in route.path:
            op["responses"]["422"] = {
                "description": "Validation Error",
                "content": {"application/json": {"schema": schemas.get(self.validation)}},
            }
        codes = set(meta.get("errors", ()))
        if "{conversation_id}" in route.path:
            codes.add(404)
        if self.body is not None:
            codes.add(413)  # a body over the limit
        for code in sorted(codes):
            op["responses"][str(code)] = self._error(schemas, _ERRORS.get(code, "Error"))
        return op

    def _error(self, schemas: _Schemas, text: str) -> dict[str, Any]:
        return {"description": text,
                "content": {"application/json": {"schema": schemas.get(self.error)}}}


_ERRORS = {400: "A path or file the request cannot use", 403: "Outside the workspace",
           404: "Not found", 409: "Does not fit the current state", 413: "Too large",
           502: "A peer failed", 503: "Not ready"}


def _parameters(schema: dict[str, Any], components: dict[str, Any]) -> list[dict[str, Any]]:
    props = schema.get("properties", {})
    if "$ref" in schema:  # a model referenced rather than inlined
        schema = components[schema["$ref"].split("/")[-1]]
        props = schema.get("properties", {})
    required = set(schema.get("required", []))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": prop}
        for name, prop in props.items()
    ]


def _webhook(schemas: _Schemas, events: tuple[int, Mode], success: tuple[int, Mode],
             validation: tuple[int, Mode]) -> dict[str, Any]:
    """SPEC 4.5: what this server POSTs to the control plane."""
    return {
        "post": {
            "summary": "Receive a batch of events: POST {webhook_url}/events/{conversation_id}",
            "operationId": "on_events",
            "parameters": [{"name": "conversation_id", "in": "path", "required": True,
                            "schema": {"type": "string", "format": "uuid"}}],
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": schemas.get(events)}}},
            "responses": {
                "200": {"description": "Accepted",
                        "content": {"application/json": {"schema": schemas.get(success)}}},
                "422": {"description": "Validation Error", "content": {"application/json": {
                    "schema": schemas.get(validation)}}},
            },
            "security": [{"APIKeyHeader": []}],
        }
    }


def document(app: Starlette) -> dict[str, Any]:
    """Built once per app (the routes do not change while it runs)."""
    cached = getattr(app.state, "openapi", None)
    if cached is None:
        guarded = getattr(app.state, "guarded", ("/api",))
        cached = app.state.openapi = build(app.routes, guarded)
    return cached


def build(routes: list[Any], guarded: tuple[str, ...] = ("/api",)) -> dict[str, Any]:
    """`guarded`: the path prefixes that need the session key (SessionAuth's)."""
    schemas = _Schemas()
    operations: list[_Operation] = []
    for route in routes:
        if isinstance(route, WebSocketRoute) or not isinstance(route, Route):
            continue
        for method in sorted(route.methods or ()):
            if method != "HEAD":
                operations.append(_Operation(route, method.lower(), schemas, guarded))
    events = schemas.ask(list[AnyEvent], "serialization")
    success = schemas.ask(Success, "validation")
    validation = schemas.ask(HTTPValidationError, "validation")
    schemas.generate()
    paths: dict[str, Any] = {}
    for operation in operations:
        paths.setdefault(operation.route.path, {})[operation.method] = operation.build(schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "agent-server", "version": __version__},
        "paths": paths,
        "webhooks": {"events": _webhook(schemas, events, success, validation)},
        "components": {
            "schemas": schemas.components,
            "securitySchemes": {"APIKeyHeader": {"type": "apiKey", "in": "header", "name": HEADER}},
        },
    }
