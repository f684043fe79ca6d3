"""What every route needs: its services, its user, and validated input (422 otherwise)."""

from __future__ import annotations

import json
import typing
from collections.abc import Awaitable, Callable
from typing import Any, TypedDict, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from control_plane.crypto import hash_key
from control_plane.errors import PayloadTooLarge, Unauthorized, invalid, invalid_field
from control_plane.services import Services
from control_plane.store import accounts
from control_plane.store.accounts import User

M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Request], Awaitable[Response]]


class LifespanState(TypedDict):
    """What the lifespan yields; Starlette copies it into every request's scope."""

    services: Services


def services(request: Request) -> Services:
    found = request.scope["state"]["services"]
    assert isinstance(found, Services)
    return found


async def user(request: Request) -> User:
    """The account of `Authorization: Bearer <API_KEY>` (SPEC 5); 401 for anything else."""
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("Authorization: Bearer <API_KEY> is required")
    found = await accounts.user_by_key_hash(services(request).db, hash_key(key.strip()))
    if found is None:
        raise Unauthorized("unknown API key")
    return found


def from_browser(request: Request) -> bool:
    """Whether a browser made this request: every browser sends `Sec-Fetch-Mode` (a header no
    page can set or remove). A browser is never given a sandbox's session key or address: it
    reaches sandboxes through /api/v1 only."""
    return "sec-fetch-mode" in request.headers


async def body(request: Request, model: type[M], limit: int | None = None) -> M:
    limit = limit or services(request).config.max_body_bytes
    data = await read_bounded(request, limit)
    try:
        parsed = json.loads(data) if data.strip() else {}  # no body: every field left out
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid_field(["body"], f"body is not JSON: {exc}", type_="json_invalid") from None
    try:
        return model.model_validate(parsed)
    except ValidationError as exc:
        raise invalid("body", exc) from None


async def read_bounded(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body over {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _is_list(annotation: Any) -> bool:
    if typing.get_origin(annotation) is list:
        return True
    return any(_is_list(a) for a in typing.get_args(annotation))


def query(request: Request, model: type[M]) -> M:
    """Query parameters -> model; list fields take repeated (`?id=a&id=b`) or comma-joined values."""
    data: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        values = request.query_params.getlist(name)
        if not values:
            continue
        if _is_list(field.annotation):
            data[name] = [v for value in values for v in value.split(",") if v]
        else:
            data[name] = values[-1]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid("query", exc) from None


def reply(value: BaseModel | list[Any] | dict[str, Any], status: int = 200) -> JSONResponse:
    if isinstance(value, BaseModel):
        return JSONResponse(value.model_dump(mode="json"), status_code=status)
    if isinstance(value, list):
        return JSONResponse([v.model_dump(mode="json") if isinstance(v, BaseModel) else v
                             for v in value], status_code=status)
    return JSONResponse(value, status_code=status)


def doc(*, summary: str, response: Any = None, body: Any = None, query: Any = None,
        status: int = 200, errors: tuple[int, ...] = ()) -> Callable[[Handler], Handler]:
    """OpenAPI facts of a handler, read by `control_plane.openapi`."""
    def mark(handler: Handler) -> Handler:
        handler.__openapi__ = {  # type: ignore[attr-defined]
            "summary": summary, "response": response, "body": body, "query": query,
            "status": status, "errors": errors}
        return handler
    return mark
