"""A property-based fuzz of every /api/v1 operation of the control plane's served
/openapi.json (schemathesis), as tests/agent_server/api/test_fuzz.py does for the agent server.

A real control plane (SQLite, the process provider) runs on a loopback port; each operation
gets FUZZ_EXAMPLES requests that fit the document and as many that do not, and FUZZ_COVERAGE of
schemathesis' coverage phase, sent with a user's key. Each must be answered within a bound,
never with a 5xx, and as every check of schemathesis says. Generated ids name nothing of this
user (404); a user may have one live sandbox, so generated starts stay cheap.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.config._checks import PositiveDataAcceptanceConfig
from schemathesis.specs.openapi.schemas import OpenApiSchema

from tests.agent_server.api.test_fuzz import CHECKS, TIMEOUT, configure, coverage_cases
from tests.control_plane.support import ControlPlane, make_config

pytestmark = pytest.mark.e2e

FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
#: Coverage-phase cases per operation and mode (0: all of them).
FUZZ_COVERAGE = int(os.environ.get("FUZZ_COVERAGE", "15"))


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    root = tmp_path_factory.mktemp("cp-fuzz")
    server = ControlPlane(make_config(root / "cp", max_sandboxes_per_user=1)).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def headers(plane: ControlPlane) -> dict[str, str]:
    return {"Authorization": f"Bearer {plane.new_user('fuzz')}"}


@pytest.fixture(scope="module")
def api_schema(plane: ControlPlane) -> OpenApiSchema:
    loaded = configure(schemathesis.openapi.from_url(plane.url + "/openapi.json"))
    # A valid start may meet the user's one-sandbox cap (429) or a sandbox not up yet (409, 503).
    loaded.config.checks.positive_data_acceptance = PositiveDataAcceptanceConfig(
        expected_statuses=["2xx", 401, 403, 404, 409, 410, 429]
    )
    return loaded


def operations() -> list[tuple[str, str]]:
    from control_plane.app import ROUTES
    from control_plane.openapi import ADMIN, _served

    return sorted(
        (method, route.path)
        for route in ROUTES
        if _served(route) and not route.path.startswith(ADMIN)  # (no operator key here)
        for method in route.methods or ()
        if method != "HEAD"
    )


OPERATIONS = operations()


@pytest.mark.parametrize(
    "mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["positive", "negative"]
)
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_every_operation_answers_as_documented(
    api_schema: OpenApiSchema,
    plane: ControlPlane,
    headers: dict[str, str],
    method: str,
    path: str,
    mode: GenerationMode,
) -> None:
    operation = api_schema[path][method]

    @given(operation.as_strategy(mode))
    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def one(case: Any) -> None:
        send(case, plane, headers, method, path, mode)

    try:
        one()
    except Unsatisfiable:
        if mode is GenerationMode.POSITIVE:
            raise
    assert httpx.get(plane.url + "/health").status_code == 200


@pytest.mark.parametrize(
    "mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["positive", "negative"]
)
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_every_operation_answers_its_coverage_cases_as_documented(
    api_schema: OpenApiSchema,
    plane: ControlPlane,
    headers: dict[str, str],
    method: str,
    path: str,
    mode: GenerationMode,
) -> None:
    """Schemathesis' coverage phase (tests/agent_server/api/test_fuzz.coverage_cases)."""
    for case in coverage_cases(api_schema, method, path, mode, FUZZ_COVERAGE):
        send(case, plane, headers, method, path, mode)
    assert httpx.get(plane.url + "/health").status_code == 200


def send(
    case: Any,
    plane: ControlPlane,
    headers: dict[str, str],
    method: str,
    path: str,
    mode: GenerationMode,
) -> None:
    """One case, the rules no schema can say met first, sent and checked."""
    if (
        mode is GenerationMode.POSITIVE
        and (method, path) == ("DELETE", "/api/v1/sandboxes/{sandbox_id}")
        and isinstance(case.query, dict)
        and isinstance((case.path_parameters or {}).get("sandbox_id"), str)
    ):  # SPEC 7: the query names the sandbox the path does
        case.query["sandbox_id"] = case.path_parameters["sandbox_id"]
    if (
        mode is GenerationMode.POSITIVE
        and isinstance(case.body, dict)
        and isinstance(case.body.get("sandbox_spec_id"), str)
    ):
        case.body["sandbox_spec_id"] = "process"  # the provider's: no schema can say it
    if mode is GenerationMode.POSITIVE and isinstance(case.body, dict):
        if isinstance(case.body.get("selected_branch"), str):
            case.body["selected_branch"] = "main"  # Git's own rules on names, and a
            case.body["selected_repository"] = "acme/demo"  # branch needs a repository
        for plugin in case.body.get("plugins") or ():
            if isinstance(plugin, dict):  # a command or a url, never both (nor neither)
                plugin.pop("command", None)
                plugin["url"] = "https://mcp.example/mcp"
        policy = case.body.get("network_policy")
        if isinstance(policy, dict) and isinstance(policy.get("allow"), list):
            # A rule's form is in the document; which ranges no sandbox reaches (and
            # that a domain's last label is not a number) is the validator's alone.
            policy["allow"] = [rule for rule in policy["allow"] if _a_rule(rule)]
    response = case.call(base_url=plane.url, headers=headers, timeout=TIMEOUT)
    try:
        case.validate_response(response, checks=CHECKS)
    except BaseException:
        print(f"{method} {path}: {response.status_code} {response.text[:2000]}")
        raise


def _a_rule(text: object) -> bool:
    from control_plane.network.policy import parse_rule

    try:
        parse_rule(str(text))
    except ValueError:
        return False
    return True
