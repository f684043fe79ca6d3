"""GET /openapi.json: an OpenAPI 3.1.0 document of every route, and SPEC 4.5's webhook."""

from __future__ import annotations

import re
from typing import Any

import httpx
import jsonschema  # openapi-spec-validator's own dependency
import openapi_spec_validator
import pytest

from agent_server.app import ROUTES
from events import KIND_NAMES
from tests.support.server import ServerProcess

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e


def route_methods() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for route in ROUTES:
        found.setdefault(route.path, set()).update(
            m.lower() for m in route.methods or () if m != "HEAD"
        )
    return found


def test_openapi_json_is_served(server: ServerProcess) -> None:
    r = httpx.get(server.url + "/openapi.json", timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")


@pytest.fixture(scope="module")
def doc(server: ServerProcess) -> dict[str, Any]:
    r = httpx.get(server.url + "/openapi.json", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref" and isinstance(v, str)] + [
            r for v in node.values() for r in refs(v)
        ]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].split("/")[-1]]
    return schema


def test_version_and_info(doc: dict[str, Any]) -> None:
    assert doc["openapi"] == "3.1.0"
    assert doc["info"]["title"] and doc["info"]["version"]


def test_every_route_is_described_with_its_methods(doc: dict[str, Any]) -> None:
    expected = route_methods()
    described = {
        path: {m for m in item if m in {"get", "post", "put", "patch", "delete"}}
        for path, item in doc["paths"].items()
    }
    assert described == expected


def test_operations_are_complete(doc: dict[str, Any]) -> None:
    for path, item in doc["paths"].items():
        declared = set(re.findall(r"{(\w+)}", path))
        for method, op in item.items():
            assert op["operationId"], (method, path)
            assert op["summary"], (method, path)
            assert any(code.startswith("2") for code in op["responses"]), (method, path)
            in_path = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert in_path == declared, (method, path)
            if path.startswith("/api") or path == "/metrics":  # /metrics: unless opened
                assert op["security"] == [{"APIKeyHeader": []}], (method, path)
                assert "401" in op["responses"], (method, path)
            else:
                assert "security" not in op, (method, path)


def test_operation_ids_are_unique(doc: dict[str, Any]) -> None:
    ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    ids += [op["operationId"] for item in doc["webhooks"].values() for op in item.values()]
    assert sorted(ids) == sorted(set(ids))


def test_the_security_scheme_is_the_session_key_header(doc: dict[str, Any]) -> None:
    assert doc["components"]["securitySchemes"]["APIKeyHeader"] == {
        "type": "apiKey",
        "in": "header",
        "name": "X-Session-API-Key",
    }


def test_every_reference_resolves(doc: dict[str, Any]) -> None:
    found = refs(doc)
    assert found
    schemas = doc["components"]["schemas"]
    for ref in found:
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.split("/")[-1] in schemas, ref


def test_validation_errors_have_spec_7_shape(doc: dict[str, Any]) -> None:
    op = doc["paths"]["/api/conversations"]["post"]
    schema = resolve(doc, op["responses"]["422"]["content"]["application/json"]["schema"])
    detail = schema["properties"]["detail"]
    assert detail["type"] == "array"
    item = resolve(doc, detail["items"])
    assert {"loc", "msg", "type"} <= set(item["required"])
    assert {"loc", "msg", "type", "input", "ctx"} <= set(item["properties"])


def test_query_parameters_of_event_search(doc: dict[str, Any]) -> None:
    op = doc["paths"]["/api/conversations/{conversation_id}/events/search"]["get"]
    names = {p["name"] for p in op["parameters"] if p["in"] == "query"}
    assert {
        "kind__eq",
        "source__eq",
        "limit",
        "page_id",
        "sort_order",
        "timestamp__gte",
        "timestamp__lt",
    } <= names


def test_the_webhook_of_spec_4_5(doc: dict[str, Any]) -> None:
    assert doc["webhooks"]
    (hook,) = doc["webhooks"].values()
    post = hook["post"]
    assert set(hook) == {"post"}
    (param,) = post["parameters"]
    assert param == {
        "name": "conversation_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "format": "uuid"},
    }
    body = post["requestBody"]
    assert body["required"] is True
    schema = resolve(doc, body["content"]["application/json"]["schema"])
    assert schema["type"] == "array"
    items = resolve(doc, schema["items"])
    variants = items.get("oneOf") or items.get("anyOf")
    assert variants, items
    kinds = {resolve(doc, v)["properties"]["kind"].get("const") for v in variants}
    assert kinds == set(KIND_NAMES) and len(kinds) == 19
    ok = resolve(doc, post["responses"]["200"]["content"]["application/json"]["schema"])
    assert ok["properties"]["success"] == {"default": True, "title": "Success", "type": "boolean"}
    bad = resolve(doc, post["responses"]["422"]["content"]["application/json"]["schema"])
    assert "detail" in bad["properties"]
    assert post["security"] == [{"APIKeyHeader": []}]


def test_the_document_is_valid_openapi(doc: dict[str, Any]) -> None:
    openapi_spec_validator.validate(doc)  # a test dependency: missing, the test fails


# -- the document tells the truth (issue 16) -------------------------------------------------


def test_a_405_allows_the_methods_of_every_route_on_the_path(server: ServerProcess) -> None:
    with server.client() as c:
        r = c.request("OPTIONS", "/api/settings")
        assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD, PATCH"
        r = c.put("/api/conversations")
        assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD, POST"


def test_a_method_the_document_does_not_list_is_a_405_naming_exactly_the_listed_ones(
    server: ServerProcess, doc: dict[str, Any]
) -> None:
    """What schemathesis' unsupported_method and allow_header_conformance check, on every path:
    `DELETE /api/conversations/search` was the conversation route's 422 about a bad UUID, and
    its Allow named that route's methods (issue 30.4)."""
    cid = "00000000-0000-0000-0000-000000000001"
    wrong = []
    with server.client() as c:
        for path, operations in doc["paths"].items():
            real = path.replace("{conversation_id}", cid).replace("{event_id}", "0" * 26)
            real = re.sub(r"\{[^}]+\}", "x", real)
            listed = {m.upper() for m in operations} & {"GET", "POST", "PUT", "PATCH", "DELETE"}
            for method in {"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} - listed:
                r = c.request(method, real)
                allow = {m.strip() for m in r.headers.get("allow", "").split(",")} - {"HEAD"}
                if r.status_code != 405 or allow != listed:
                    wrong.append((method, path, r.status_code, r.headers.get("allow")))
    assert not wrong


def test_every_status_and_media_type_is_declared(doc: dict[str, Any]) -> None:
    create = doc["paths"]["/api/conversations"]["post"]["responses"]
    assert {"200", "201", "413", "422"} <= set(create)
    diff = doc["paths"]["/api/conversations/{conversation_id}/git/diff"]["get"]["responses"]
    assert set(diff["200"]["content"]) == {"application/json", "text/plain"}


def test_settings_responses_show_the_masked_key_and_no_write_only_field(
    doc: dict[str, Any],
) -> None:
    response = doc["paths"]["/api/settings"]["get"]["responses"]["200"]
    settings = resolve(doc, response["content"]["application/json"]["schema"])
    assert "writeOnly" not in str(settings) and "writeOnly" not in str(
        [resolve(doc, ref_schema) for ref_schema in [{"$ref": r} for r in refs(settings)]]
    )
    request = resolve(
        doc,
        doc["paths"]["/api/settings"]["patch"]["requestBody"]["content"]["application/json"][
            "schema"
        ],
    )
    assert request != settings  # the key is writeOnly where it is written


def test_the_rules_the_server_enforces_are_in_the_schemas(doc: dict[str, Any]) -> None:
    create = resolve(
        doc,
        doc["paths"]["/api/conversations"]["post"]["requestBody"]["content"]["application/json"][
            "schema"
        ],
    )
    tags, secrets = create["properties"]["tags"], create["properties"]["secrets"]
    assert tags["propertyNames"] == {"pattern": "^[a-z0-9_-]{1,50}$"}
    assert tags["maxProperties"] == 50 and tags["additionalProperties"]["maxLength"] == 256
    assert secrets["propertyNames"]["pattern"].startswith("^[A-Za-z_]")
    command = resolve(
        doc,
        doc["paths"]["/api/conversations/{conversation_id}/commands"]["post"]["requestBody"][
            "content"
        ]["application/json"]["schema"],
    )
    assert command["properties"]["env"]["propertyNames"]["pattern"].startswith("^[A-Za-z_]")
    assert command["properties"]["command"]["pattern"] == "^[^\\x00]*$"
    repository = doc["components"]["schemas"]["RepositorySpec"]
    url = re.compile(repository["properties"]["url"]["pattern"])
    assert url.match("https://github.com/a/b.git") and url.match("git@github.com:a/b.git")
    assert not url.match("ftp://h/x") and not url.match("https://u:password@h/x")
    param = doc["paths"]["/api/conversations/{conversation_id}"]["get"]["parameters"][0]
    assert param["schema"] == {"type": "string", "format": "uuid"}


def test_a_number_is_no_boolean(server: ServerProcess) -> None:
    with server.client() as c:
        r = c.post(
            "/api/conversations", json={"agent": {"llm": {"model": "m"}}, "stuck_detection": 0}
        )
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "stuck_detection"]
        r = c.patch("/api/settings", json={"agent": {"condenser": {"enabled": 1}}})
        assert r.status_code == 422, r.text
        r = c.post(
            "/api/conversations", json={"agent": {"llm": {"model": "m"}}, "max_iterations": "5"}
        )
        assert r.status_code == 422, r.text


def test_completion_logs_token_ids_and_critics_are_described(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    llm = schemas["LLMConfig-Input"]["properties"]
    for name in ("log_completions", "return_token_ids"):
        assert (llm[name]["type"], llm[name]["default"]) == ("boolean", False)
    assert llm["litellm_extra_body"]["type"] == "object"
    critic = schemas["AgentSpec"]["properties"]["critic"]
    assert critic["anyOf"][0]["oneOf"] == [
        {"$ref": f"#/components/schemas/{kind}"}
        for kind in (
            "ModelCritic",
            "CommandCritic",
            "PassCritic",
            "EmptyPatchCritic",
            "AgentFinishedCritic",
        )
    ]
    assert schemas["PassCritic"]["required"] == ["kind"]
    assert (
        "kind" in schemas["ModelCritic"]["required"] and "llm" in schemas["ModelCritic"]["required"]
    )
    assert set(schemas["CommandCritic"]["required"]) == {"kind", "command"}
    score = schemas["CriticResult"]["properties"]["score"]
    assert (score["minimum"], score["maximum"]) == (0.0, 1.0)
    for kind in ("ActionEvent", "MessageEvent"):
        assert schemas[kind]["properties"]["critic_result"]["anyOf"][0] == {
            "$ref": "#/components/schemas/CriticResult"
        }
    assert set(schemas["TokenEvent"]["required"]) == {
        "source",
        "prompt_token_ids",
        "response_token_ids",
    }
    assert set(schemas["LLMCompletionLogEvent"]["required"]) == {"filename", "log_data"}


def test_tool_params_are_documented_as_the_server_checks_them(doc: dict[str, Any]) -> None:
    """A `_` key in a tool's params is a note the server accepts; an unknown key is a 422."""
    [planning] = [
        v
        for v in doc["components"]["schemas"]["ToolSpec"]["oneOf"]
        if "planning_file_editor" in v["properties"]["name"]["enum"]
    ]
    params = planning["properties"]["params"]
    jsonschema.validate({"plan_path": "P.md", "_note": "mine"}, params)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"bogus": 1}, params)
