"""agent_server.errors: one exception tree, each class with its status, one handler."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest
from pydantic import BaseModel, Field, ValidationError
from starlette import status
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Scope

from agent_server.errors import ConversationGone, InvalidTransition
from agent_server.git import GitFailed
from agent_server.workspace import (
    FileMissing,
    NotAFile,
    OutsideWorkspace,
    PermissionDenied,
    TooLarge,
    WorkspaceError,
)
from web.errors import (
    HANDLERS,
    Conflict,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    ServiceError,
    UpstreamError,
    from_pydantic,
    invalid,
)

CASES: list[tuple[ServiceError, type[ServiceError], int, int]] = [
    (ServiceError("x"), ServiceError, 500, status.WS_1011_INTERNAL_ERROR),
    (invalid(["a"], "bad"), ServiceError, 422, status.WS_1008_POLICY_VIOLATION),
    (NotFound("x"), ServiceError, 404, 4004),
    (ConversationGone("c1"), NotFound, 404, 4004),
    (Conflict("x"), ServiceError, 409, status.WS_1008_POLICY_VIOLATION),
    (
        InvalidTransition("idle", "paused", ["running"]),
        Conflict,
        409,
        status.WS_1008_POLICY_VIOLATION,
    ),
    (PayloadTooLarge("x"), ServiceError, 413, status.WS_1009_MESSAGE_TOO_BIG),
    (WorkspaceError("x"), ServiceError, 400, status.WS_1011_INTERNAL_ERROR),
    (OutsideWorkspace("x"), WorkspaceError, 403, status.WS_1011_INTERNAL_ERROR),
    (PermissionDenied("x"), WorkspaceError, 403, status.WS_1011_INTERNAL_ERROR),
    (FileMissing("x"), WorkspaceError, 404, status.WS_1011_INTERNAL_ERROR),
    (NotAFile("x"), WorkspaceError, 409, status.WS_1011_INTERNAL_ERROR),
    (TooLarge("x", 10), WorkspaceError, 413, status.WS_1011_INTERNAL_ERROR),
    (UpstreamError("Code", "x"), ServiceError, 502, status.WS_1011_INTERNAL_ERROR),
]


@pytest.mark.parametrize(
    ("exc", "parent", "http", "ws"), CASES, ids=[type(c[0]).__name__ for c in CASES]
)
def test_each_class_declares_its_status(
    exc: ServiceError, parent: type, http: int, ws: int
) -> None:
    assert isinstance(exc, parent)
    assert (exc.status_code, exc.ws_close_code) == (http, ws)


def test_git_failure_is_an_upstream_error() -> None:
    assert issubclass(GitFailed, UpstreamError)


def test_invalid_transition_names_what_was_expected_and_what_happened() -> None:
    exc = InvalidTransition("finished", "paused", ["running"])
    assert exc.detail == (
        "execution_status cannot go from finished to paused (from finished it may go to: running)"
    )
    assert InvalidTransition("a", "b", []).detail.endswith("it may go to: none)")


def test_invalid_input_at_prefixes_every_location() -> None:
    exc = InvalidInput(
        [
            {"loc": ["tools", 0, "name"], "msg": "unknown", "type": "t"},
            {"loc": ["secrets", "K"], "msg": "short", "type": "t"},
        ]
    )
    moved = exc.at("body", "agent")
    assert [e["loc"] for e in moved.errors] == [
        ["body", "agent", "tools", 0, "name"],
        ["body", "agent", "secrets", "K"],
    ]
    assert [e["loc"] for e in exc.errors] == [["tools", 0, "name"], ["secrets", "K"]]
    assert moved.detail == "body.agent.tools.0.name: unknown; body.agent.secrets.K: short"


class Body(BaseModel):
    name: str = Field(min_length=3)
    api_key: str


def test_from_pydantic_locates_and_redacts() -> None:
    with pytest.raises(ValidationError) as caught:
        Body.model_validate({"name": "x", "api_key": 5})
    exc = from_pydantic(caught.value, "body")
    by_loc = {tuple(e["loc"]): e for e in exc.errors}
    assert set(by_loc) == {("body", "name"), ("body", "api_key")}
    assert by_loc[("body", "name")]["type"] == "string_too_short"
    assert by_loc[("body", "name")]["ctx"] == {"min_length": 3}


async def raises(request: Request) -> Response:
    raise {
        "invalid": invalid(["x"], "bad \ud800 input", input_="\ud800"),
        "gone": ConversationGone("c1"),
        "upstream": UpstreamError("GitFailed", "git exploded"),
        "http": HTTPException(405, "no", headers={"Allow": "GET"}),
        "bug": RuntimeError("secret internals"),
    }[request.path_params["what"]]


@pytest.fixture
async def client() -> httpx.AsyncClient:
    app = Starlette(routes=[Route("/{what}", raises)], exception_handlers=HANDLERS)  # type: ignore[arg-type]
    # Starlette re-raises an unexpected exception after its 500 is sent (for the server's log).
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://t")


async def test_the_handler_answers_each_kind(client: httpx.AsyncClient) -> None:
    async with client:
        r = await client.get("/invalid")
        assert r.status_code == 422
        assert r.json() == {
            "detail": [
                {"loc": ["x"], "msg": "bad \ud800 input", "type": "value_error", "input": "\ud800"}
            ]
        }
        assert b"\\ud800" in r.content  # a lone surrogate escaped, never a failure
        r = await client.get("/gone")
        assert (r.status_code, r.json()) == (404, {"detail": "Conversation c1 was deleted"})
        r = await client.get("/upstream")
        assert (r.status_code, r.json()) == (502, {"detail": "git exploded"})
        r = await client.get("/http")
        # Allow lists the methods of every route on the path (Starlette adds HEAD to GET).
        assert (r.status_code, r.json(), r.headers["allow"]) == (405, {"detail": "no"}, "GET, HEAD")
        r = await client.get("/bug")
        assert (r.status_code, r.json()) == (500, {"detail": "Internal server error"})


async def test_a_client_gone_mid_body_is_no_error_of_ours(caplog: pytest.LogCaptureFixture) -> None:
    """A sandbox stopped while its webhook's body was on the way: a line at INFO, not a
    logged "unexpected error" with its traceback (and no exception out of the app)."""

    async def reads(request: Request) -> Response:
        async for _ in request.stream():
            pass
        return Response()

    app = Starlette(routes=[Route("/", reads, methods=["POST"])], exception_handlers=HANDLERS)  # type: ignore[arg-type]
    messages: Iterator[Message] = iter(
        [{"type": "http.request", "body": b"[{", "more_body": True}, {"type": "http.disconnect"}]
    )

    async def receive() -> Message:
        return next(messages)

    async def send(message: Message) -> None:
        pass

    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/",
        "raw_path": b"/",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-length", b"100")],
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 5000),
    }
    with caplog.at_level(logging.INFO):
        await app(scope, receive, send)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("went away" in r.getMessage() for r in caplog.records)


def test_every_upstream_failure_is_an_upstream_error() -> None:
    from agent_server.agent.llm import LLMFailure
    from agent_server.agent.mcp import MCPServerError
    from agent_server.git import GitFailed
    from agent_server.repository import CloneFailed
    from web.errors import UpstreamError

    for failure in (
        LLMFailure("RateLimitError", "slow down"),
        MCPServerError("X", "gone"),
        CloneFailed("no such repository"),
        GitFailed(["status"], 128, "bad"),
    ):
        assert isinstance(failure, UpstreamError)
        assert failure.code and failure.detail
