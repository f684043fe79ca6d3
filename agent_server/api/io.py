"""Reading requests into models and writing responses: one place for 422s and 404s."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast
from uuid import UUID

from pydantic import BaseModel, ValidationError
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response

from agent_server.api.schemas import ConversationInfo
from agent_server.conversations import Conversation, ConversationService
from agent_server.telemetry import logs as log_context
from agent_server.errors import (
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    from_pydantic,
    invalid,
)

if TYPE_CHECKING:
    from agent_server.app import Services

M = TypeVar("M", bound=BaseModel)
MAX_BODY = 8 * 1024 * 1024
#: Arrays and objects inside one another at most; deeper JSON is refused before anything
#: walks it recursively (the decoder, pydantic, a merge, the masker).
MAX_DEPTH = 64


async def _bounded_body(request: Request) -> bytes:
    """The body, refused with 413 as soon as it passes MAX_BODY (never held whole first)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise PayloadTooLarge(f"request body over {MAX_BODY} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise PayloadTooLarge(f"request body over {MAX_BODY} bytes")
    return bytes(body)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float | int:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a number")
    # JSON Schema counts 3.0 as an integer: so does the (strict) validation after this.
    if value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _too_deep(value: Any) -> bool:
    """Whether containers nest more than MAX_DEPTH deep (iterative: no recursion to exhaust)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= MAX_DEPTH:
                    return True
                stack.append((child, depth + 1))
    return False


def parse_json(raw: bytes | str, where: str = "body") -> Any:
    """Strict JSON: NaN, Infinity, numbers beyond a double and nesting deeper than MAX_DEPTH
    are refused (422), not stored."""
    too_deep = f"JSON decode error: arrays and objects nested more than {MAX_DEPTH} deep"
    try:
        data = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise invalid([where], too_deep, "json_invalid", {}) from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise invalid([where, getattr(exc, "pos", 0)], f"JSON decode error: {exc}",
                      "json_invalid", {}) from None
    if isinstance(data, (dict, list)) and _too_deep(data):
        raise invalid([where], too_deep, "json_invalid", {})
    return data


async def read_body(request: Request, model: type[M]) -> M:
    raw = await _bounded_body(request)
    data = parse_json(raw) if raw.strip() else None
    if data is None:
        raise invalid(["body"], "Field required: a JSON object", "missing")
    return validate_json(model, json.dumps(data), "body")


def validate_json(model: type[M], raw: bytes | str, where: str) -> M:
    """`raw` (already through parse_json) as `model`, strictly, as the document declares it:
    `0` is no boolean and `"5"` no integer; strings stand for ids, times and enums."""
    try:
        return model.model_validate_json(raw, strict=True)
    except ValidationError as exc:
        raise from_pydantic(exc, where) from None


async def read_raw_object(request: Request) -> dict[str, Any]:
    """A JSON object body (for merges validated afterwards)."""
    raw = await _bounded_body(request)
    data = parse_json(raw)
    if not isinstance(data, dict):
        raise invalid(["body"], "Input should be a JSON object", "dict_type", data)
    return data


def read_query(request: Request, model: type[M]) -> M:
    data: dict[str, Any] = {}
    for key in request.query_params.keys():
        values = request.query_params.getlist(key)
        field = model.model_fields.get(key)
        is_list = field is not None and "list" in str(field.annotation)
        data[key] = values if is_list else values[-1]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_pydantic(exc, "query") from None


def path_uuid(request: Request, name: str = "conversation_id") -> UUID:
    raw = request.path_params[name]
    try:
        return UUID(raw)
    except ValueError:
        raise invalid(["path", name], "Input should be a valid UUID", "uuid_parsing", raw) from None


def services(request: HTTPConnection) -> Services:
    """The lifespan's typed state (agent_server.app.State)."""
    return cast("Services", request.state.services)


def service(request: Request) -> ConversationService:
    return services(request).conversations


def conversation(request: Request) -> Conversation:
    conv_id = path_uuid(request)
    conv = service(request).get(conv_id)
    if conv is None:
        raise NotFound(f"Conversation {conv_id} not found")
    log_context.set_conversation(conv.id)  # what this request logs from here names it
    return conv


@contextlib.contextmanager
def located(*prefix: str | int) -> Iterator[None]:
    """Domain code raises InvalidInput located inside what it checked; the API says where
    that was in the request (e.g. "body")."""
    try:
        yield
    except InvalidInput as exc:
        raise exc.at(*prefix) from None


def info(conv: Conversation) -> ConversationInfo:
    """A conversation as the API shows it, with its webhook lag read from delivery now."""
    return conv.info()


def reply(value: BaseModel | dict[str, Any] | list[Any], status: int = 200) -> Response:
    if isinstance(value, BaseModel):
        return Response(value.model_dump_json(), status_code=status, media_type="application/json")
    return JSONResponse(value, status_code=status)


def doc(
    *,
    summary: str,
    body: type[BaseModel] | None = None,
    query: type[BaseModel] | None = None,
    response: Any = None,
    status: int = 200,
    also: dict[int, str] | None = None,
    media: dict[str, Any] | None = None,
    errors: tuple[int, ...] = (),
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Describe an endpoint for /openapi.json (read by agent_server.openapi).

    `also`: other success statuses (with the same body) and when they happen; `media`: the
    success body's media types other than application/json, by type (a JSON schema each).
    """

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__openapi__ = {  # type: ignore[attr-defined]
            "summary": summary,
            "body": body,
            "query": query,
            "response": response,
            "status": status,
            "also": also or {},
            "media": media or {},
            "errors": errors,
        }
        return fn

    return mark
