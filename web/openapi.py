"""An OpenAPI 3.1.0 document built from a route table and the `doc` marks of its handlers.

It says what a service does, no more and no less: request bodies as they are validated
(strictly: `0` is no boolean), responses as they are serialized, every success status and
media type a route answers with, and the errors the server gives: 401 where a credential is
needed, 404 where the path names something, 413 and 422 where there is input. The fuzz tests
hold each service to its document.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter
from starlette.routing import BaseRoute, Route

from web.errors import ErrorDetail, HTTPValidationError

REF = "#/components/schemas/{model}"
Mode = Literal["validation", "serialization"]
Key = tuple[int, Mode]

ERRORS = {
    400: "A path or file the request cannot use",
    401: "Missing or unknown credential",
    403: "Not allowed",
    404: "Not found",
    409: "Does not fit the current state",
    410: "Gone",
    413: "Too large",
    429: "A limit was reached",
    502: "A peer failed",
    503: "Not available now; try again",
}


class Schemas:
    """Collects every annotation first, then generates them together, so a model used both
    ways gets two components when its two forms differ (`LLMConfig-Input`, `-Output`)."""

    def __init__(self) -> None:
        self._inputs: list[tuple[int, Mode, TypeAdapter[Any]]] = []
        self._keys: dict[Key, int] = {}
        self.components: dict[str, Any] = {}
        self._made: dict[Key, dict[str, Any]] = {}

    def ask(self, annotation: Any, mode: Mode) -> Key:
        key = (id(annotation), mode)
        if key not in self._keys:
            self._keys[key] = len(self._inputs)
            self._inputs.append((len(self._inputs), mode, TypeAdapter(annotation)))
        return self._keys[key], mode

    def generate(self) -> None:
        made, defs = TypeAdapter.json_schemas(self._inputs, ref_template=REF)
        self._made = {key: _names_checked(schema) for key, schema in made.items()}
        self.components = {
            name: _names_checked(schema) for name, schema in defs.get("$defs", {}).items()
        }

    def get(self, key: Key) -> dict[str, Any]:
        return self._made[key]

    def error(self, text: str) -> dict[str, Any]:
        return {
            "description": text,
            "content": {
                "application/json": {"schema": self.get(self.ask(ErrorDetail, "serialization"))}
            },
        }

    def validation_error(self, mode: Mode = "serialization") -> dict[str, Any]:
        return {
            "description": "Validation Error",
            "content": {
                "application/json": {"schema": self.get(self.ask(HTTPValidationError, mode))}
            },
        }


def _names_checked(node: Any) -> Any:
    """pydantic writes a dict with constrained keys as `patternProperties`, which lets any other
    key through; the servers refuse them: `propertyNames` says so."""
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


@dataclass(frozen=True)
class Webhook:
    """A call the service makes or receives outside its routes (OpenAPI's `webhooks`)."""

    summary: str
    operation_id: str
    body: Any
    """The request body's annotation."""
    response: Any
    """The 200 body's annotation."""
    security: str
    errors: dict[int, str] = field(default_factory=dict)
    path_parameter: str = "conversation_id"


@dataclass(frozen=True)
class Service:
    """What the document says of the service as a whole."""

    title: str
    version: str
    security_schemes: dict[str, dict[str, Any]]
    guard: Callable[[str], str | None]
    """A route path -> the security scheme it needs (None: open)."""
    description: str | None = None
    include: Callable[[Route], bool] = lambda route: True
    path_parameters: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Schemas of path parameters by name (default: a string)."""
    webhooks: dict[str, Webhook] = field(default_factory=dict)
    finish: Callable[[dict[str, Any]], None] | None = None
    """Called with the generated components, to refine what pydantic cannot say."""
    errors: dict[int, str] = field(default_factory=dict)
    """What an error status means for this service, over ERRORS."""


class _Operation:
    """One method of one route, its schemas asked for up front."""

    def __init__(self, route: Route, method: str, service: Service, schemas: Schemas) -> None:
        self.route, self.method, self.service = route, method, service
        self.meta: dict[str, Any] = getattr(route.endpoint, "__openapi__", {})
        ask = schemas.ask
        self.validation = ask(HTTPValidationError, "serialization")
        self.error = ask(ErrorDetail, "serialization")
        self.query = ask(self.meta["query"], "validation") if self.meta.get("query") else None
        self.body = ask(self.meta["body"], "validation") if self.meta.get("body") else None
        response = self.meta.get("response")
        self.response = ask(response, "serialization") if response is not None else None

    def build(self, schemas: Schemas) -> dict[str, Any]:
        route, meta = self.route, self.meta
        op: dict[str, Any] = {
            "summary": meta.get("summary", route.name),
            "operationId": self.method + re.sub(r"[^A-Za-z0-9]+", "_", route.path).rstrip("_"),
            "responses": {},
        }
        names = re.findall(r"{(\w+)", route.path)
        params = [
            {
                "name": name,
                "in": "path",
                "required": True,
                "schema": self.service.path_parameters.get(name, {"type": "string"}),
            }
            for name in names
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
        content.update(
            {media: {"schema": schema} for media, schema in meta["media"].items()}
            if meta.get("media")
            else {}
        )
        ok: dict[str, Any] = {"description": "OK"}
        if content:
            ok["content"] = content
        op["responses"][str(meta.get("status", 200))] = ok
        for code, text in (meta.get("also") or {}).items():
            op["responses"][str(code)] = {**ok, "description": text}
        text = {**ERRORS, **self.service.errors}
        scheme = self.service.guard(route.path)
        if scheme is not None:
            op["security"] = [{scheme: []}]
            op["responses"]["401"] = schemas.error(text[401])
        if self.query is not None or self.body is not None or names:
            op["responses"]["422"] = schemas.validation_error()
        codes = set(meta.get("errors", ())) - {401}
        if names:
            codes.add(404)
        if self.body is not None:
            codes.add(413)  # a body over the limit
        for code in sorted(codes):
            op["responses"][str(code)] = schemas.error(text.get(code, "Error"))
        return op


def _parameters(schema: dict[str, Any], components: dict[str, Any]) -> list[dict[str, Any]]:
    if "$ref" in schema:  # a model referenced rather than inlined
        schema = components[schema["$ref"].split("/")[-1]]
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": prop}
        for name, prop in props.items()
    ]


def _webhook(hook: Webhook, body: Key, response: Key, schemas: Schemas) -> dict[str, Any]:
    responses: dict[str, Any] = {
        "200": {
            "description": "Accepted",
            "content": {"application/json": {"schema": schemas.get(response)}},
        },
        "422": schemas.validation_error("validation"),
    }
    for code, text in sorted(hook.errors.items()):
        responses[str(code)] = schemas.error(text)
    return {
        "post": {
            "summary": hook.summary,
            "operationId": hook.operation_id,
            "parameters": [
                {
                    "name": hook.path_parameter,
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "format": "uuid"},
                }
            ],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": schemas.get(body)}},
            },
            "responses": responses,
            "security": [{hook.security: []}],
        }
    }


def build(routes: list[BaseRoute], service: Service) -> dict[str, Any]:
    """The document of `service` serving `routes` (its websockets and mounts left out)."""
    schemas = Schemas()
    operations = [
        _Operation(route, method.lower(), service, schemas)
        for route in routes
        if isinstance(route, Route) and service.include(route)
        for method in sorted(route.methods or ())
        if method != "HEAD"
    ]
    hooks = {
        name: (
            hook,
            schemas.ask(hook.body, "serialization"),
            schemas.ask(hook.response, "validation"),
        )
        for name, hook in service.webhooks.items()
    }
    schemas.ask(ErrorDetail, "serialization")
    schemas.ask(HTTPValidationError, "validation")
    schemas.generate()
    if service.finish is not None:
        service.finish(schemas.components)
    paths: dict[str, Any] = {}
    for operation in operations:
        paths.setdefault(operation.route.path, {})[operation.method] = operation.build(schemas)
    info: dict[str, Any] = {"title": service.title, "version": service.version}
    if service.description:
        info["description"] = service.description
    document: dict[str, Any] = {"openapi": "3.1.0", "info": info, "paths": paths}
    if hooks:
        document["webhooks"] = {
            name: _webhook(hook, body, response, schemas)
            for name, (hook, body, response) in hooks.items()
        }
    document["components"] = {
        "schemas": schemas.components,
        "securitySchemes": service.security_schemes,
    }
    return document
