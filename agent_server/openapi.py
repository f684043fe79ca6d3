"""The agent server's OpenAPI document: `web.openapi` over its routes, plus what only this
server has to say: the session key, the shape of a tool (its name and its tool set's params,
as check_tool_names accepts them), the pattern of event ids, and the webhook it POSTs to the
control plane (SPEC 4.5). The fuzz (tests/agent_server/api/test_fuzz.py) holds the server to it.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter
from starlette.routing import BaseRoute

import tools as toolsets
from agent_server import __version__
from agent_server.agent.toolbox import ALIASES
from agent_server.auth import HEADER
from core.ids import EVENT_ID_PATTERN
from events.kinds import AnyEvent
from web import openapi
from web.io import Success
from web.openapi import REF

SCHEME = "APIKeyHeader"


def _tool_specs(components: dict[str, Any]) -> None:
    """A tool, as check_tool_names accepts it: a known name (or an alias of one) and the params
    its tool set takes."""
    names: dict[str, list[str]] = {name: [name] for name in toolsets.TOOL_SETS}
    for alias, name in ALIASES.items():
        names.setdefault(name, [name]).append(alias)
    for component in [c for c in components if c.split("-")[0] == "ToolSpec"]:
        variants = []
        for name, spellings in sorted(names.items()):
            toolset = toolsets.TOOL_SETS.get(name)
            params: dict[str, Any] = {"type": "object"}
            if toolset is not None and toolset.params_model is not None:
                params = TypeAdapter(toolset.params_model()).json_schema(ref_template=REF)
                components.update(params.pop("$defs", {}))
                # Keys with a leading `_` are the caller's notes, left out (tools.base.params_as).
                params.setdefault("patternProperties", {})["^_"] = {}
            variants.append(
                {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"enum": sorted(spellings)}, "params": params},
                }
            )
        components[component] = {
            "title": components[component].get("title", "ToolSpec"),
            "oneOf": variants,
        }


#: The operation whose body is merged into what is stored (`agent_server.settings.deep_merge`).
MERGED = ("/api/settings", "patch")


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if any(branch.get("type") == "null" for branch in schema.get("anyOf", ())):
        return schema
    return {"anyOf": [schema, {"type": "null"}]}


def _merge_patch(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """A body deep-merged into a stored value, as deep_merge reads it: an object's fields
    merge one by one (none required; null removes one that has a default, back to it); a
    map's entries come whole, or null to remove one; anything else (a list, a union of forms,
    a scalar) replaces what is stored. The stored value's own schema said every field was
    required whole: `{"acp_agents": null}` was a valid patch refused by the document
    (schemathesis' ST201)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        patch = name.removesuffix("-Input") + "-Patch"
        if patch not in components:
            components[patch] = {}  # (a model that holds itself)
            components[patch] = _merge_patch(components[name], components)
        return {"$ref": REF.format(model=patch)}
    branches = schema.get("anyOf", ())
    if len(branches) == 2 and {"type": "null"} in branches:  # an optional object, merged too
        return {**schema, "anyOf": [_merge_patch(b, components) for b in branches]}
    if "properties" in schema:
        required = set(schema.get("required", ()))
        fields = {
            name: (
                _merge_patch(field, components)
                if name in required
                else _nullable(_merge_patch(field, components))
            )
            for name, field in schema["properties"].items()
        }
        return {k: v for k, v in schema.items() if k != "required"} | {"properties": fields}
    if isinstance(schema.get("additionalProperties"), dict):
        return {**schema, "additionalProperties": _nullable(schema["additionalProperties"])}
    return schema


def _merged_bodies(document: dict[str, Any]) -> dict[str, Any]:
    path, method = MERGED
    body = document["paths"][path][method]["requestBody"]["content"]["application/json"]
    body["schema"] = _merge_patch(body["schema"], document["components"]["schemas"])
    return document


def build(routes: list[BaseRoute], guarded: tuple[str, ...] = ("/api",)) -> dict[str, Any]:
    """`guarded`: the path prefixes that need the session key (SessionAuth's)."""
    return _merged_bodies(_build(routes, guarded))


def _build(routes: list[BaseRoute], guarded: tuple[str, ...]) -> dict[str, Any]:
    return openapi.build(
        routes,
        openapi.Service(
            title="agent-server",
            version=__version__,
            security_schemes={SCHEME: {"type": "apiKey", "in": "header", "name": HEADER}},
            guard=lambda path: SCHEME if path.startswith(guarded) else None,
            path_parameters={
                "conversation_id": {"type": "string", "format": "uuid"},
                "event_id": {"type": "string", "pattern": f"^{EVENT_ID_PATTERN}$"},
            },
            webhooks={
                "events": openapi.Webhook(
                    summary=(
                        "Receive a batch of events: POST {webhook_url}/events/{conversation_id}"
                    ),
                    operation_id="on_events",
                    body=list[AnyEvent],
                    response=Success,
                    security=SCHEME,
                )
            },
            finish=_tool_specs,
            errors={
                401: "Missing or wrong session key",
                403: "Outside the workspace",
                503: "Not ready",
            },
        ),
    )
