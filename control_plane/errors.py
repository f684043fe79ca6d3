"""The one error hierarchy of the control plane, and the handlers that turn it into bodies.

Every failure a client can cause or see is an `ApiError` subclass carrying its status code, so
a route raises and never builds an error response itself. Bad input is SPEC 7's
`HTTPValidationError` (422, `{"detail": [{loc, msg, type, input, ctx}]}`); anything else is
`{"detail": "..."}`. An unexpected exception is logged and answered 500 without a traceback.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from core.masking import REDACTED, SECRET_KEYS

logger = logging.getLogger(__name__)

#: Fields whose values never go back to a client, even inside a 422 body.
SECRET_FIELDS = SECRET_KEYS | {"llm_api_key", "value"}


class ApiError(Exception):
    """Base of every error answered to a client; `status` is the HTTP status code."""

    status = 500

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Unauthorized(ApiError):
    """No credential, or one that is not known."""

    status = 401


class Forbidden(ApiError):
    """A known credential used where it does not reach (e.g. a sandbox posting for another's conversation)."""

    status = 403


class NotFound(ApiError):
    """Unknown id, or one that belongs to another user (the two are indistinguishable)."""

    status = 404


class Conflict(ApiError):
    """The resource is in a state that refuses this operation (e.g. a sandbox in ERROR)."""

    status = 409


class Gone(ApiError):
    """The sandbox was cleaned up (MISSING): its workspace is no longer there."""

    status = 410


class LimitReached(ApiError):
    """A configured bound (e.g. live sandboxes per user) would be passed."""

    status = 429


class PayloadTooLarge(ApiError):
    status = 413


class BadGateway(ApiError):
    """The sandbox's agent server failed or answered something unusable."""

    status = 502


class Unavailable(ApiError):
    """A dependency (the database, a sandbox) cannot be used right now; retrying is right."""

    status = 503


class Invalid(ApiError):
    """Bad input; `errors` are SPEC 7 ValidationError items."""

    status = 422

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("validation failed")
        self.errors = errors


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


def _mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: REDACTED if k in SECRET_FIELDS and v not in (None, "", {}) else _mask(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return str(value)


def invalid(where: str, exc: ValidationError) -> Invalid:
    """pydantic errors -> Invalid, each `loc` prefixed by where the input was (body, query, path)."""
    items = []
    for err in exc.errors(include_url=False):
        loc = [where, *err.get("loc", ())]
        secret = any(part in SECRET_FIELDS for part in loc)
        item: dict[str, Any] = {
            "loc": loc,
            "msg": err.get("msg", "invalid"),
            "type": err.get("type", "value_error"),
            "input": REDACTED if secret else _plain(_mask(err.get("input"))),
        }
        if err.get("ctx"):
            item["ctx"] = {k: _plain(v) for k, v in err["ctx"].items()}
        items.append(item)
    return Invalid(items)


def invalid_field(loc: list[str | int], msg: str, input_: Any = None,
                  type_: str = "value_error") -> Invalid:
    return Invalid([{"loc": loc, "msg": msg, "type": type_, "input": _plain(input_)}])


class _AsciiJSON(JSONResponse):
    """Error bodies echo client input, which may hold lone surrogates: escape, never fail."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, default=str).encode()


async def on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    if isinstance(exc, Invalid):
        return _AsciiJSON({"detail": exc.errors}, status_code=422)
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    return _AsciiJSON({"detail": exc.detail}, status_code=exc.status, headers=headers)


async def on_http(request: Request, exc: Exception) -> Response:
    """Starlette's own (unknown route 404, wrong method 405) in the same body shape."""
    assert isinstance(exc, HTTPException)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


async def on_unexpected(request: Request, exc: Exception) -> Response:
    logger.exception("unexpected error on %s %s", request.method, request.url.path)
    return JSONResponse({"detail": "Internal server error"}, status_code=500)


HANDLERS = {ApiError: on_api_error, HTTPException: on_http, Exception: on_unexpected}
