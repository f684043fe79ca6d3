"""The one exception tree of the server, and how it becomes a response.

    AgentServerError                 500, closes a socket with 1011
    ├── InvalidInput                 422 HTTPValidationError (SPEC 7); loc relative to the domain
    │                                object until the API prefixes "body", "query" or "path"
    ├── NotFound                     404
    │   └── ConversationGone         404: deleted (or the server stopping) while in use
    ├── Conflict                     409: the request does not fit the current state
    │   └── InvalidTransition        an execution-status move the table does not allow
    ├── PayloadTooLarge              413
    ├── WorkspaceError               400: a workspace path or file the request cannot use
    │   ├── OutsideWorkspace         403
    │   ├── PermissionDenied         403
    │   ├── FileMissing              404
    │   ├── NotAFile                 400
    │   └── TooLarge                 413
    └── UpstreamError                502: a peer failed (the LLM, git, a clone, an MCP server)
        ├── LLMFailure               (agent.llm)
        ├── GitFailed                (git)
        ├── CloneFailed              (repository)
        └── MCPServerError           (agent.mcp)

Each class says its HTTP status and websocket close code; `HANDLERS` maps them, so routes and
domain code raise, and never build error responses themselves. A tool's failure is not in this
tree: tools raise `tools.base.ToolError`, which the loop turns into an AgentErrorEvent.

A client never gets a traceback: unexpected exceptions are logged and answered with a plain
500 body.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette import status
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route

from agent_server.accesslog import escape
from core.masking import redact

Loc = Sequence[str | int]
logger = logging.getLogger(__name__)


class ValidationErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str
    input: Any = None
    ctx: dict[str, Any] | None = None


class HTTPValidationError(BaseModel):
    detail: list[ValidationErrorItem]


class ErrorDetail(BaseModel):
    detail: str


class AgentServerError(Exception):
    """Base of every failure the server explains to its client."""

    status_code: int = 500
    ws_close_code: int = status.WS_1011_INTERNAL_ERROR

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidInput(AgentServerError):
    """Bad input, as ValidationError items; `loc` is relative to what was checked."""

    status_code = 422
    ws_close_code = status.WS_1008_POLICY_VIOLATION

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors))
        self.errors = errors

    def at(self, *prefix: str | int) -> InvalidInput:
        """The same errors found inside `prefix` (e.g. "body", or "body", "agent")."""
        return InvalidInput([{**e, "loc": [*prefix, *e["loc"]]} for e in self.errors])


class NotFound(AgentServerError):
    status_code = 404
    ws_close_code = 4004


class ConversationGone(NotFound):
    """The conversation was deleted (or the server is stopping) while a request used it."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"Conversation {conversation_id} was deleted")


class Conflict(AgentServerError):
    status_code = 409
    ws_close_code = status.WS_1008_POLICY_VIOLATION


class InvalidTransition(Conflict):
    """A state change the transition table does not allow; says what was expected."""

    def __init__(self, current: str, wanted: str, allowed: Sequence[str]) -> None:
        expected = ", ".join(allowed) or "none"
        super().__init__(f"execution_status cannot go from {current} to {wanted} "
                         f"(from {current} it may go to: {expected})")
        self.current, self.wanted, self.allowed = current, wanted, tuple(allowed)


class PayloadTooLarge(AgentServerError):
    status_code = 413
    ws_close_code = status.WS_1009_MESSAGE_TOO_BIG


class UpstreamError(AgentServerError):
    """A peer the server depends on failed; `code` names the failure class."""

    status_code = 502

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


def _plain(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


#: The tags of the `agent` union (agent.spec.AnyAgentSpec), which pydantic puts in an error's
#: loc; left out, so that `agent.llm.model` is located as it was before ACP agents.
AGENT_TAGS = ("Agent", "ACPAgent")


#: The tags of a secret value's two forms (agent_server.record.SecretValue).
SECRET_TAGS = frozenset({"str", "StaticSecret"})


def _untagged(loc: Sequence[str | int]) -> list[str | int]:
    """The location without the tags pydantic adds for a union's chosen variant (the agent's
    kind, a secret value's form): a client reads where in its own document the error is."""
    return [part for i, part in enumerate(loc)
            if not (i > 0 and loc[i - 1] == "agent" and part in AGENT_TAGS)
            and not (i > 1 and loc[i - 2] == "secrets" and part in SECRET_TAGS)]


def from_pydantic(exc: ValidationError, *prefix: str | int) -> InvalidInput:
    """pydantic errors -> InvalidInput, under `prefix` (e.g. "body")."""
    items = []
    for err in exc.errors(include_url=False):
        item: dict[str, Any] = {
            "loc": [*prefix, *_untagged(err.get("loc", ()))],
            "msg": err.get("msg", "invalid"),
            "type": err.get("type", "value_error"),
            "input": _plain(redact(err.get("input"))),
        }
        if err.get("ctx"):
            item["ctx"] = {k: _plain(v) for k, v in err["ctx"].items()}
        items.append(item)
    return InvalidInput(items)


def invalid(loc: Loc, msg: str, type_: str = "value_error", input_: Any = None) -> InvalidInput:
    return InvalidInput([{"loc": list(loc), "msg": msg, "type": type_, "input": _plain(input_)}])


def validation_text(exc: ValidationError) -> str:
    """A pydantic error as one line a model or a socket client reads."""
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "input"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


class AsciiJSONResponse(JSONResponse):
    """Error bodies echo client input, which may hold lone surrogates: escape, never fail."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, default=str).encode()


async def on_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, AgentServerError)
    if isinstance(exc, InvalidInput):
        return AsciiJSONResponse({"detail": exc.errors}, status_code=422)
    if exc.status_code >= 500:
        logger.warning("%s on %s %s: %s", type(exc).__name__, request.method,
                       escape(request.url.path), escape(exc.detail))
    return AsciiJSONResponse({"detail": exc.detail}, status_code=exc.status_code)


async def on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        # Starlette names the methods of the one route it tried; a path has several routes.
        headers["Allow"] = _allowed(request)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)


def _allowed(request: Request) -> str:
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Route) and route.methods:
            match, _ = route.matches(request.scope)
            if match is not Match.NONE:
                methods |= route.methods
    return ", ".join(sorted(methods))


async def on_unexpected(request: Request, exc: Exception) -> Response:
    logger.exception("unexpected error on %s %s", request.method, escape(request.url.path))
    return JSONResponse({"detail": "Internal server error"}, status_code=500)


HANDLERS = {
    AgentServerError: on_error,
    HTTPException: on_http,
    Exception: on_unexpected,
}
