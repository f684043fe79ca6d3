"""A property-based fuzz of every route from the served /openapi.json (schemathesis).

The app of build_app (a ScriptedModel, no LLM) runs in-process on a loopback port. Each
operation of the document gets FUZZ_EXAMPLES generated requests that fit the document and as
many that do not, sent over HTTP; each must be answered within a bound, never with a 5xx, and
with a status, media type, headers and body the document declares. A longer run:
bench/fuzz.py.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode, checks
from schemathesis.config._checks import NegativeDataRejectionConfig
from schemathesis.specs.openapi.schemas import OpenApiSchema

from agent_server.app import ROUTES
from tests.support.inprocess import KEY, served

#: Generated requests per operation and mode (there are about 35 operations, two modes).
FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "50"))
CONVERSATION = str(uuid.UUID(int=1))
HEADERS = {"X-Session-API-Key": KEY}
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    checks.negative_data_rejection,
    checks.positive_data_acceptance,
]
#: Seconds one answer may take: a hang fails the case instead of the whole run.
TIMEOUT = 30
OPERATIONS = sorted(
    (method, route.path) for route in ROUTES for method in route.methods or () if method != "HEAD"
)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def base_url(root: Path) -> Iterator[str]:
    with served(root) as url:
        yield url


@pytest.fixture(scope="module")
def api_schema(base_url: str) -> OpenApiSchema:
    return configure(schemathesis.openapi.from_url(base_url + "/openapi.json"))


def configure(loaded: OpenApiSchema) -> OpenApiSchema:
    # Unknown query parameters and fields are ignored, as documented, not refused: an extra one
    # is no invalid request.
    loaded.config.generation.allow_extra_parameters = False
    # A body refused for its size (413) is refused too.
    loaded.config.checks.negative_data_rejection = NegativeDataRejectionConfig(
        expected_statuses=[400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429, "5XX"]
    )
    return loaded


def ensure_conversation(base_url: str) -> None:
    """The conversation the cases aim at exists (a case may have deleted it)."""
    if (
        httpx.get(f"{base_url}/api/conversations/{CONVERSATION}", headers=HEADERS).status_code
        == 404
    ):
        r = httpx.post(
            base_url + "/api/conversations",
            headers=HEADERS,
            json={"conversation_id": CONVERSATION, "agent": {"llm": {"model": "m"}}},
        )
        assert r.status_code in (200, 201), r.text


def ensure_default_agent(base_url: str) -> None:
    """Settings hold a default LLM, so a creation without `agent` is a valid request (a case
    of PATCH /api/settings may have removed it)."""
    r = httpx.patch(
        base_url + "/api/settings",
        headers=HEADERS,
        json={"agent": {"llm": {"model": "m"}, "tools": []}},
    )
    assert r.status_code == 200, r.text


def fuzz(
    api_schema: OpenApiSchema,
    base_url: str,
    workspace: Path,
    method: str,
    path: str,
    mode: GenerationMode,
    examples: int,
    derandomize: bool = True,
) -> int:
    """Runs `examples` cases of one operation (the same ones each run, unless `derandomize` is
    False); how many were sent."""
    operation = api_schema[path][method]
    fixed = {"conversation_id": CONVERSATION} if "{conversation_id}" in path else None
    sent = 0

    @given(operation.as_strategy(mode, path_parameters=fixed))
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=derandomize,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def one(case: Any) -> None:
        nonlocal sent
        if fixed:
            ensure_conversation(base_url)
        if path == "/api/conversations" and method == "POST":
            ensure_default_agent(base_url)
        if isinstance(case.body, dict) and isinstance(case.body.get("workspace"), dict):
            case.body["workspace"]["working_dir"] = str(workspace)  # never anywhere else
        if path.endswith("/commands") and isinstance(case.body, dict):
            timeout = case.body.get("timeout", 60)
            if (
                isinstance(timeout, (int, float))
                and not isinstance(timeout, bool)
                and 2 < timeout <= 600
            ):  # (beyond: an invalid case, left invalid)
                case.body["timeout"] = 2  # a generated command must not hold the run long
        # Negative cases keep what makes them invalid (a LookupSecret's bad URL stays bad).
        semantic_rules(case.body, base_url + "/health", lookups=mode is GenerationMode.POSITIVE)
        if isinstance(case.body, dict) and "parent_conversation_id" in case.body:
            ensure_conversation(base_url)
        sent += 1
        response = case.call(base_url=base_url, headers=HEADERS, timeout=TIMEOUT)
        try:
            case.validate_response(response, checks=CHECKS)
        except BaseException:
            print(f"{method} {path}: {response.status_code} {response.text[:2000]}")
            raise

    try:
        one()
    except Unsatisfiable:
        if mode is GenerationMode.POSITIVE:
            raise
        # Nothing to make invalid (no parameters, no body): no negative case exists.
    return sent


def _whole(value: Any) -> bool:
    """A JSON integer (3.0 is one too)."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and float(value).is_integer()
    )


def semantic_rules(body: Any, lookup_url: str, lookups: bool = True) -> None:
    """Rules the server checks that no JSON schema can say, met by generated bodies (valid
    cases stay valid; the rules themselves have their own tests): an ACP agent's program must
    be found on PATH (or saved, when only named), a plan file stays in the working directory, a
    summarizing condenser keeps fewer than max_size // 2 messages, an LLM asked for token ids
    is not streamed, a parent conversation exists, and a LookupSecret's URL answers
    (`lookup_url`, asked with no headers)."""
    if isinstance(body, list):
        for item in body:
            semantic_rules(item, lookup_url, lookups)
    if not isinstance(body, dict):
        return
    if lookups and body.get("kind") == "LookupSecret" and isinstance(body.get("url"), str):
        body["url"], body["headers"] = lookup_url, {}
    if body.get("kind") == "ACPAgent":  # (without a command: an agent saved under its name)
        if isinstance(body.get("acp_command"), list) and body["acp_command"]:
            body["acp_command"][0] = "true"
        elif "acp_command" not in body:
            body["acp_command"] = ["true"]
    if isinstance(body.get("plan_path"), str) and ".." in body["plan_path"]:
        body["plan_path"] = "PLAN.md"  # (a relative path out of the working directory)
    extra = body.get("litellm_extra_body")
    if body.get("stream") is True and (
        body.get("return_token_ids") is True
        or (isinstance(extra, dict) and extra.get("return_token_ids") is True)
    ):
        body["stream"] = False
    if isinstance(body.get("parent_conversation_id"), str):
        body["parent_conversation_id"] = CONVERSATION
    if body.get("kind") == "LLMSummarizingCondenser":
        size, first = body.get("max_size", 240), body.get("keep_first", 2)
        if _whole(size) and _whole(first) and 0 < size <= 100_000 and first >= size // 2:
            body["keep_first"] = 0
            if size < 2:
                body["max_size"] = 2
    for value in body.values():
        semantic_rules(value, lookup_url, lookups)


@pytest.mark.parametrize(
    "mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["positive", "negative"]
)
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_every_route_answers_as_documented(
    api_schema: OpenApiSchema,
    base_url: str,
    root: Path,
    method: str,
    path: str,
    mode: GenerationMode,
    tally: list[int],
) -> None:
    tally.append(fuzz(api_schema, base_url, root / "workspace", method, path, mode, FUZZ_EXAMPLES))


@pytest.fixture(scope="module")
def tally() -> Iterator[list[int]]:
    """Cases sent, per test; the total is printed at the end (pytest -s shows it)."""
    sent: list[int] = []
    yield sent
    print(f"\nfuzz: {sum(sent)} cases over {len(sent)} operation-modes")
