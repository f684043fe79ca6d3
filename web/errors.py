"""The one exception tree of both services, and how it becomes a response or a close.

    ServiceError                 500, closes a socket with 1011
    ├── InvalidInput             422 HTTPValidationError (SPEC 7), 1008; loc relative to the
    │                            object checked until the API prefixes "body", "query", "path"
    ├── Unauthorized             401, 4001: no credential, or an unknown one
    ├── Forbidden                403, 4003: a known credential where it does not reach
    ├── NotFound                 404, 4004: unknown, or another user's (indistinguishable)
    ├── Conflict                 409, 1008: the request does not fit the current state
    │   └── InvalidTransition    a move a status table does not allow (`web.states`)
    ├── Gone                     410, 4010: it was there and is no more (a sandbox cleaned up)
    ├── PayloadTooLarge          413, 1009
    ├── LimitReached             429, 1013: a configured bound would be passed
    ├── UpstreamError            502, 1011: a peer failed (the LLM, git, a sandbox); `code`
    │                            names the failure class
    └── Unavailable              503, 1013: a dependency cannot be used now; retrying is right

Each service adds its own subclasses (the agent server's `ConversationGone`, its workspace
errors; see each service's errors module) and never a second root. Each class says its HTTP
status and websocket close code; `HANDLERS` maps them for HTTP and websocket scopes alike, so
routes, sockets and domain code raise, and never build error responses or pick close codes
themselves. A tool's failure is not in this tree: tools raise `tools.base.ToolError`, which the
loop turns into an AgentErrorEvent.

A client never gets a traceback: unexpected exceptions are logged and answered with a plain
500 body (or a 1011 close). A client that goes away while its body is read (a sandbox
stopped mid-webhook) is no error of ours: a line at INFO, and an answer no one reads.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette import status
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, HTTPConnection
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route
from starlette.websockets import WebSocket

from core.masking import REDACTED, SECRET_KEYS, redact
from web.logs import escape

Loc = Sequence[str | int]
logger = logging.getLogger(__name__)

#: Keys whose values never go back to a client, even inside a 422 body.
SECRET_FIELDS = SECRET_KEYS | {"llm_api_key"}
#: The longest close reason a websocket frame carries (RFC 6455: 123 bytes).
MAX_REASON = 120


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


class ServiceError(Exception):
    """Base of every failure a service explains to its client."""

    status_code: int = 500
    ws_close_code: int = status.WS_1011_INTERNAL_ERROR

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    @property
    def headers(self) -> dict[str, str] | None:
        return None


class InvalidInput(ServiceError):
    """Bad input, as ValidationError items; `loc` is relative to what was checked."""

    status_code = 422
    ws_close_code = status.WS_1008_POLICY_VIOLATION

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors))
        self.errors = errors

    def at(self, *prefix: str | int) -> InvalidInput:
        """The same errors found inside `prefix` (e.g. "body", or "body", "agent")."""
        return InvalidInput([{**e, "loc": [*prefix, *e["loc"]]} for e in self.errors])


class Unauthorized(ServiceError):
    """No credential, or one that is not known; `scheme` is what WWW-Authenticate asks for."""

    status_code = 401
    ws_close_code = 4001

    def __init__(self, detail: str, scheme: str | None = None) -> None:
        super().__init__(detail)
        self.scheme = scheme

    @property
    def headers(self) -> dict[str, str] | None:
        return {"WWW-Authenticate": self.scheme} if self.scheme else None


class Forbidden(ServiceError):
    """A known credential used where it does not reach (a sandbox posting for another's
    conversation)."""

    status_code = 403
    ws_close_code = 4003


class NotFound(ServiceError):
    """Unknown id, or one that belongs to another user (the two are indistinguishable)."""

    status_code = 404
    ws_close_code = 4004


class Conflict(ServiceError):
    """The resource is in a state that refuses this operation."""

    status_code = 409
    ws_close_code = status.WS_1008_POLICY_VIOLATION


class InvalidTransition(Conflict):
    """A move a status table does not allow (`web.states.Moves`): says where the status is,
    where it was asked to go, and the moves it may make from there. `refusal` words it for
    the case at hand ("sandbox s1 is STARTING: it cannot be paused now"); `subject` names the
    status in the plain wording."""

    subject = "the status"

    def __init__(
        self, current: str, wanted: str, allowed: Sequence[str], *, refusal: str | None = None
    ) -> None:
        expected = ", ".join(allowed) or "none"
        said = refusal or f"{self.subject} cannot go from {current} to {wanted}"
        super().__init__(f"{said} (from {current} it may go to: {expected})")
        self.current, self.wanted, self.allowed = current, wanted, tuple(allowed)


class Gone(ServiceError):
    """It existed and was cleaned up (a MISSING sandbox's workspace)."""

    status_code = 410
    ws_close_code = 4010


class PayloadTooLarge(ServiceError):
    status_code = 413
    ws_close_code = status.WS_1009_MESSAGE_TOO_BIG


class LimitReached(ServiceError):
    """A configured bound (sandboxes per user, subscribers per conversation) would be passed."""

    status_code = 429
    ws_close_code = status.WS_1013_TRY_AGAIN_LATER


class UpstreamError(ServiceError):
    """A peer the service depends on failed; `code` names the failure class."""

    status_code = 502

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


class Unavailable(ServiceError):
    """A dependency (the database, a sandbox) cannot be used right now; retrying is right."""

    status_code = 503
    ws_close_code = status.WS_1013_TRY_AGAIN_LATER


# -- 422 bodies ---------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """`value` when it is JSON as it stands, else its text (a 422 echoes it back)."""
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return str(value)


def from_pydantic(
    exc: ValidationError,
    *prefix: str | int,
    untag: Callable[[Loc], list[str | int]] | None = None,
    secret: Collection[str] = SECRET_FIELDS,
) -> InvalidInput:
    """pydantic errors -> InvalidInput, under `prefix` (e.g. "body").

    `untag` drops what pydantic adds to a loc for a union's chosen variant, so a client reads
    where in its own document the error is. The input of an error inside a `secret` field is
    never echoed; any other input is echoed with its secret keys redacted.
    """
    items = []
    for err in exc.errors(include_url=False):
        loc = list(err.get("loc", ()))
        loc = untag(loc) if untag is not None else loc
        hidden = any(part in secret for part in loc)
        item: dict[str, Any] = {
            "loc": [*prefix, *loc],
            "msg": err.get("msg", "invalid"),
            "type": err.get("type", "value_error"),
            "input": REDACTED if hidden else plain(redact(err.get("input"))),
        }
        if err.get("ctx"):
            item["ctx"] = {k: plain(v) for k, v in err["ctx"].items()}
        items.append(item)
    return InvalidInput(items)


def invalid(loc: Loc, msg: str, type_: str = "value_error", input_: Any = None) -> InvalidInput:
    """One error at `loc`."""
    return InvalidInput([{"loc": list(loc), "msg": msg, "type": type_, "input": plain(input_)}])


def validation_text(exc: ValidationError, whole: str = "input") -> str:
    """A pydantic error as one line a model or a socket client reads (`whole` names what an
    error about the value as a whole is located at)."""
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or whole
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


# -- handlers -----------------------------------------------------------------------------------


class AsciiJSONResponse(JSONResponse):
    """Error bodies echo client input, which may hold lone surrogates: escape, never fail."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, default=str).encode()


async def close(websocket: WebSocket, code: int, reason: str) -> None:
    """Close with `code`; the reason is cut to what a close frame holds."""
    await websocket.close(code=code, reason=reason.encode()[:MAX_REASON].decode(errors="ignore"))


async def on_error(conn: HTTPConnection, exc: Exception) -> Response | None:
    """A ServiceError as its response, or as its close code on a websocket."""
    assert isinstance(exc, ServiceError)
    if exc.status_code >= 500:
        logger.warning(
            "%s on %s: %s", type(exc).__name__, escape(conn.url.path), escape(exc.detail)
        )
    if isinstance(conn, WebSocket):
        await close(conn, exc.ws_close_code, exc.detail)
        return None
    if isinstance(exc, InvalidInput):
        return AsciiJSONResponse({"detail": exc.errors}, status_code=422)
    return AsciiJSONResponse(
        {"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers
    )


async def on_http(conn: HTTPConnection, exc: Exception) -> Response | None:
    """Starlette's own (unknown route 404, wrong method 405) in the same body shape."""
    assert isinstance(exc, HTTPException)
    if isinstance(conn, WebSocket):
        await close(conn, 4000 + exc.status_code, str(exc.detail))
        return None
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        # Starlette names the methods of the one route it tried; a path has several routes.
        headers["Allow"] = allowed(conn)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)


def allowed(conn: HTTPConnection) -> str:
    """The methods every route of this path serves, as an Allow header says them."""
    methods: set[str] = set()
    for route in conn.app.router.routes:
        if isinstance(route, Route) and route.methods:
            match, _ = route.matches(conn.scope)
            if match is not Match.NONE:
                methods |= route.methods
    return ", ".join(sorted(methods))


async def on_disconnect(conn: HTTPConnection, exc: Exception) -> Response | None:
    assert isinstance(exc, ClientDisconnect)
    logger.info("the client went away on %s", escape(conn.url.path))
    return Response(status_code=status.HTTP_400_BAD_REQUEST)


async def on_unexpected(conn: HTTPConnection, exc: Exception) -> Response | None:
    logger.exception("unexpected error on %s", escape(conn.url.path))
    if isinstance(conn, WebSocket):
        await close(conn, status.WS_1011_INTERNAL_ERROR, "internal server error")
        return None
    return JSONResponse({"detail": "Internal server error"}, status_code=500)


HANDLERS: dict[Any, Callable[..., Any]] = {
    ServiceError: on_error,
    HTTPException: on_http,
    ClientDisconnect: on_disconnect,
    Exception: on_unexpected,
}
