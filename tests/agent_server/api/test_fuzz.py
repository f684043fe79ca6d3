"""A property-based fuzz of every route from the served /openapi.json (schemathesis).

The app of build_app (a ScriptedModel, no LLM) runs in-process on a loopback port. Each
operation of the document gets FUZZ_EXAMPLES generated requests that fit the document and as
many that do not, and FUZZ_COVERAGE of schemathesis' coverage phase (boundary values, each
constraint broken in turn, undeclared methods, a missing key), sent over HTTP; each must be
answered within a bound, never with a 5xx, and as every check of schemathesis says (the
document's statuses, media types, headers and bodies, valid requests accepted and invalid ones
refused, the key required). A longer run: bench/fuzz.py, or FUZZ_EXAMPLES=100 FUZZ_COVERAGE=0.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test
from schemathesis import GenerationMode, checks
from schemathesis.config._checks import NegativeDataRejectionConfig
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation.drivers import CoverageGenerator
from schemathesis.generation.feedback import FeedbackSources
from schemathesis.generation.overrides import Override
from schemathesis.specs.openapi.schemas import OpenApiSchema

from agent_server.app import ROUTES
from tests.support.inprocess import KEY, served

#: Generated requests per operation and mode (there are about 55 operations, two modes).
FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
#: Coverage-phase cases per operation and mode (0: all of them, some 8,600 in all).
FUZZ_COVERAGE = int(os.environ.get("FUZZ_COVERAGE", "20"))
#: Stateful scenarios (sequences of linked calls), and calls in each at most.
FUZZ_STATEFUL = int(os.environ.get("FUZZ_STATEFUL", "15"))
FUZZ_STEPS = int(os.environ.get("FUZZ_STEPS", "10"))
CONVERSATION = str(uuid.UUID(int=1))
HEADERS = {"X-Session-API-Key": KEY}
#: Every check schemathesis has. Those of a coverage case (missing_required_header,
#: unsupported_method) or of a stateful sequence (use_after_free, ensure_resource_availability)
#: pass over a single generated case; ignored_auth sends each case again without the key.
#: object_level_authorization needs a second user's credentials (tests/control_plane/tenants.py
#: holds users apart).
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    checks.negative_data_rejection,
    checks.positive_data_acceptance,
    checks.missing_required_header,
    checks.unsupported_method,
    checks.allow_header_conformance,
    checks.ignored_auth,
    checks.use_after_free,
    checks.ensure_resource_availability,
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
    """Settings hold a default LLM, so a creation without `agent` is a valid request and a
    settings patch of some of the LLM's fields merges into one (a case of PATCH /api/settings
    may have removed it)."""
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
        sent += 1
        send(case, base_url, workspace, method, path, mode)

    try:
        one()
    except Unsatisfiable:
        if mode is GenerationMode.POSITIVE:
            raise
        # Nothing to make invalid (no parameters, no body): no negative case exists.
    return sent


def send(
    case: Any, base_url: str, workspace: Path, method: str, path: str, mode: GenerationMode
) -> None:
    """One case, prepared, sent and checked."""
    prepare(case, base_url, workspace, method, path, mode)
    response = case.call(base_url=base_url, headers=HEADERS, timeout=TIMEOUT)
    try:
        case.validate_response(response, checks=CHECKS)
    except BaseException:
        print(f"{case.method} {path}: {response.status_code} {response.text[:2000]}")
        raise


def prepare(
    case: Any, base_url: str, workspace: Path, method: str, path: str, mode: GenerationMode
) -> None:
    """The server's state a case needs, and the rules no schema can say, met."""
    if "{conversation_id}" in path:
        ensure_conversation(base_url)
    if (method, path) in (("POST", "/api/conversations"), ("PATCH", "/api/settings")):
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
    if mode is GenerationMode.POSITIVE:
        for holder, key in ((case.query, "path"), (case.body, "cwd"), (case.body, "project_dir")):
            if isinstance(holder, dict) and isinstance(holder.get(key), str):
                holder[key] = held(holder[key])
    if isinstance(case.body, dict) and "parent_conversation_id" in case.body:
        ensure_conversation(base_url)


def linked(
    api_schema: OpenApiSchema,
    base_url: str,
    headers: dict[str, str],
    prepared: Callable[[Any], None],
) -> type[RuleBasedStateMachine]:
    """Schemathesis' stateful phase as a Hypothesis state machine: sequences of calls, each
    taking ids from an earlier answer along the links schemathesis infers from the document,
    every check run on each answer (use_after_free and ensure_resource_availability among them,
    which look back at the sequence). `prepared` readies each case as `prepare` does."""
    machine: Any = api_schema.as_state_machine()

    class Linked(machine):  # type: ignore[misc]
        def before_call(self, case: Any) -> None:
            prepared(case)

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": base_url, "headers": headers, "timeout": TIMEOUT}

        def validate_response(
            self,
            response: Any,
            case: Any,
            additional_checks: Any = None,
            **kwargs: Any,
        ) -> None:
            try:
                case.validate_response(
                    response, checks=CHECKS, transport_kwargs=kwargs or None, recorder=self.recorder
                )
            except BaseException:
                print(f"{case.method} {case.path}: {response.status_code} {response.text[:2000]}")
                raise

    return Linked


def run_linked(machine: type[RuleBasedStateMachine], scenarios: int) -> None:
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=scenarios,
            stateful_step_count=FUZZ_STEPS,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        ),
    )


def coverage_cases(
    api_schema: OpenApiSchema, method: str, path: str, mode: GenerationMode, cases: int
) -> list[Any]:
    """Schemathesis' coverage phase for one operation: boundary values, each constraint
    broken in turn, a missing header, methods the path does not serve. At most `cases` of
    them (0: all), taken from every kind of scenario in turn, spread over each kind's cases;
    path ids aim at CONVERSATION unless the case is about the id."""
    operation = api_schema[path][method]
    generator = CoverageGenerator(
        operation=operation,
        generation_modes=[mode],
        generation_config=api_schema.config.generation_for(operation=operation, phase="coverage"),
        auth_storage=None,
        override=Override(),
        feedback=FeedbackSources(),
    )
    kinds: dict[str, list[Any]] = {}
    for case in generator:
        data = case.meta.phase.data if case.meta is not None else None
        scenario = str(getattr(data, "scenario", ""))
        about_path = getattr(data, "parameter_location", None) is ParameterLocation.PATH
        if "conversation_id" in (case.path_parameters or {}) and not about_path:
            case.path_parameters["conversation_id"] = CONVERSATION
        kinds.setdefault(scenario, []).append(case)
    if not cases:
        return [case for group in kinds.values() for case in group]
    spread = [group[:: max(1, len(group) // cases)] for group in kinds.values()]
    taken = [case for turn in itertools.zip_longest(*spread) for case in turn if case is not None]
    return taken[:cases]


#: Bytes of a generated path: with any working directory a test makes, under PATH_MAX resolved.
PATH_BYTES = 2048


def held(path: str) -> str:
    """`path` as a file system holds it: components of at most NAME_MAX (255) bytes, the whole
    within PATH_BYTES. The document says 255 characters and 4096 in all (JSON Schema counts
    characters, and cannot know the working directory a path is resolved in); past the
    system's limits the server answers 400, as its document says."""
    parts = [_utf8(part)[:255].decode(errors="ignore") for part in path.split("/")]
    kept = _utf8("/".join(parts))[:PATH_BYTES].decode(errors="ignore")
    return kept or "."


def _utf8(text: str) -> bytes:
    return text.encode(errors="surrogatepass")  # (a lone surrogate is dropped by the decode)


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


@pytest.mark.parametrize(
    "mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["positive", "negative"]
)
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_every_route_answers_its_coverage_cases_as_documented(
    api_schema: OpenApiSchema,
    base_url: str,
    root: Path,
    method: str,
    path: str,
    mode: GenerationMode,
    tally: list[int],
) -> None:
    """The coverage phase's cases: what the random fuzz above rarely reaches (a path of 4096
    zeros, a parameter one past its bound, PATCH on a GET-only path, no session key)."""
    cases = coverage_cases(api_schema, method, path, mode, FUZZ_COVERAGE)
    for case in cases:
        send(case, base_url, root / "workspace", method, path, mode)
    tally.append(len(cases))


def test_linked_operations_answer_as_documented(
    api_schema: OpenApiSchema, base_url: str, root: Path
) -> None:
    """A conversation created, then read, changed, forked and deleted through the ids its
    answers hold: each answer as documented, and a deleted one gone, a created one there."""

    def prepared(case: Any) -> None:
        mode = case.meta.generation.mode if case.meta is not None else GenerationMode.POSITIVE
        path = case.operation.path
        prepare(case, base_url, root / "workspace", case.operation.method.upper(), path, mode)

    run_linked(linked(api_schema, base_url, HEADERS, prepared), FUZZ_STATEFUL)


@pytest.fixture(scope="module")
def tally() -> Iterator[list[int]]:
    """Cases sent, per test; the total is printed at the end (pytest -s shows it)."""
    sent: list[int] = []
    yield sent
    print(f"\nfuzz: {sum(sent)} cases over {len(sent)} operation-modes")
