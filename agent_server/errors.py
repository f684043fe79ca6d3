"""Error bodies: SPEC 7's HTTPValidationError (422) and `{"detail": ...}` for the rest.

A client never gets a traceback: unexpected exceptions are logged and answered with a plain
500 body.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from core.masking import redact

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


class RequestInvalid(Exception):
    """Bad input: answered 422 with the errors, prefixed by where they were found."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors)
        self.errors = errors


def _plain(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def from_pydantic(exc: ValidationError, where: str) -> RequestInvalid:
    """pydantic errors -> RequestInvalid with locations like ["body", "agent", "llm"]."""
    items = []
    for err in exc.errors(include_url=False):
        item: dict[str, Any] = {
            "loc": [where, *err.get("loc", ())],
            "msg": err.get("msg", "invalid"),
            "type": err.get("type", "value_error"),
            "input": _plain(redact(err.get("input"))),
        }
        if err.get("ctx"):
            item["ctx"] = {k: _plain(v) for k, v in err["ctx"].items()}
        items.append(item)
    return RequestInvalid(items)


def invalid(loc: list[str | int], msg: str, type_: str = "value_error", input_: Any = None) -> RequestInvalid:
    return RequestInvalid([{"loc": loc, "msg": msg, "type": type_, "input": _plain(input_)}])


class AsciiJSONResponse(JSONResponse):
    """Error bodies echo client input, which may hold lone surrogates: escape, never fail."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, default=str).encode()


async def on_invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestInvalid)
    return AsciiJSONResponse({"detail": exc.errors}, status_code=422)


async def on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


async def on_gone(request: Request, exc: Exception) -> JSONResponse:
    """Something the request used was deleted meanwhile: 404, as if it had never been."""
    return JSONResponse({"detail": str(exc)}, status_code=404)


async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unexpected error on %s %s", request.method, request.url.path)
    return JSONResponse({"detail": "Internal server error"}, status_code=500)


HANDLERS = {
    RequestInvalid: on_invalid,
    HTTPException: on_http,
    Exception: on_unexpected,
}
