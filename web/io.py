"""Reading requests into models and writing responses, the same way in both services.

Bodies are read bounded (413 as soon as they pass their limit, never held whole first) and
parsed strictly: NaN, Infinity, numbers beyond a double and nesting deeper than MAX_DEPTH are
refused with a 422, never stored. Bodies validate strictly, as the OpenAPI document declares
them (`0` is no boolean, `"5"` no integer); queries, which are all text, validate laxly.
"""

from __future__ import annotations

import contextlib
import json
import math
import typing
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from uuid import UUID

from pydantic import BaseModel, ValidationError
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response

from web.errors import (
    SECRET_FIELDS,
    InvalidInput,
    Loc,
    PayloadTooLarge,
    from_pydantic,
    invalid,
)

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
#: Arrays and objects inside one another at most; deeper JSON is refused before anything
#: walks it recursively (the decoder, pydantic, a merge, the masker).
MAX_DEPTH = 64


async def read_bounded(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body over {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLarge(f"request body over {limit} bytes")
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
    """Strict JSON, or a 422 located at `where`."""
    too_deep = f"JSON decode error: arrays and objects nested more than {MAX_DEPTH} deep"
    try:
        data = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise invalid([where], too_deep, "json_invalid", {}) from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise invalid(
            [where, getattr(exc, "pos", 0)], f"JSON decode error: {exc}", "json_invalid", {}
        ) from None
    if isinstance(data, (dict, list)) and _too_deep(data):
        raise invalid([where], too_deep, "json_invalid", {})
    return data


def validate(
    model: type[M],
    data: Any,
    where: str,
    *,
    untag: Callable[[Loc], list[str | int]] | None = None,
    secret: frozenset[str] = SECRET_FIELDS,
) -> M:
    """Parsed JSON as `model`, strictly as the document declares it: strings stand for ids,
    times and enums (JSON mode), but `0` is no boolean and `"5"` no integer."""
    try:
        return model.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        raise from_pydantic(exc, where, untag=untag, secret=secret) from None


async def read_body(
    request: Request,
    model: type[M],
    *,
    limit: int,
    empty: dict[str, Any] | None = None,
    untag: Callable[[Loc], list[str | int]] | None = None,
    secret: frozenset[str] = SECRET_FIELDS,
) -> M:
    """The JSON body as `model`. No body at all is `empty` when given (every field left out),
    a 422 otherwise."""
    raw = await read_bounded(request, limit)
    data = parse_json(raw) if raw.strip() else empty
    if data is None:
        raise invalid(["body"], "Field required: a JSON object", "missing")
    return validate(model, data, "body", untag=untag, secret=secret)


async def read_object(request: Request, *, limit: int) -> dict[str, Any]:
    """A JSON object body, for merges validated afterwards."""
    data = parse_json(await read_bounded(request, limit))
    if not isinstance(data, dict):
        raise invalid(["body"], "Input should be a JSON object", "dict_type", data)
    return data


def _is_list(annotation: Any) -> bool:
    if typing.get_origin(annotation) is list:
        return True
    return any(_is_list(a) for a in typing.get_args(annotation))


def read_query(request: HTTPConnection, model: type[M]) -> M:
    """Query parameters as `model`. A list field takes repeated (`?id=a&id=b`) and comma-joined
    (`?id=a,b`) values; any other field one value, and a repeated one is refused (422) rather
    than one of them chosen in silence: the client meant something the query cannot say. Names
    the model does not know are passed on, so a model that forbids extras refuses them."""
    data: dict[str, Any] = {}
    params = request.query_params
    for name in params.keys():
        values = params.getlist(name)
        field = model.model_fields.get(name)
        if field is not None and _is_list(field.annotation):
            data[name] = [v for value in values for v in value.split(",") if v]
        elif len(values) > 1:
            raise invalid(["query", name], "Input should be one value, not repeated", input_=values)
        else:
            data[name] = values[0]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_pydantic(exc, "query") from None


def path_uuid(request: HTTPConnection, name: str) -> UUID:
    raw = request.path_params[name]
    try:
        return UUID(raw)
    except ValueError:
        raise invalid(["path", name], "Input should be a valid UUID", "uuid_parsing", raw) from None


def services(conn: HTTPConnection, cls: type[T]) -> T:
    """The lifespan's typed state: what the app yielded as `services`, checked to be `cls`."""
    found = conn.scope["state"]["services"]
    if not isinstance(found, cls):
        raise TypeError(f"the lifespan state holds {type(found).__name__}, not {cls.__name__}")
    return found


@contextlib.contextmanager
def located(*prefix: str | int) -> Iterator[None]:
    """Domain code raises InvalidInput located inside what it checked; the API says where
    that was in the request (e.g. "body")."""
    try:
        yield
    except InvalidInput as exc:
        raise exc.at(*prefix) from None


def reply(
    value: BaseModel | dict[str, Any] | list[Any] | int,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> Response:
    """A model (or a list of them, or plain JSON) as the JSON body."""
    if isinstance(value, BaseModel):
        body = value.model_dump_json()
    elif isinstance(value, list):
        body = (
            "["
            + ",".join(
                v.model_dump_json() if isinstance(v, BaseModel) else _dumps(v) for v in value
            )
            + "]"
        )
    else:
        body = _dumps(value)
    return Response(body, status_code=status, media_type="application/json", headers=headers)


class Success(BaseModel):
    # The acknowledgement of an operation with nothing else to say (SPEC 4.5's webhook answer
    # among them); a comment, not a docstring: a docstring would be the schema's description.
    success: bool = True


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def doc(
    *,
    summary: str,
    body: Any = None,
    query: type[BaseModel] | None = None,
    response: Any = None,
    status: int = 200,
    also: dict[int, str] | None = None,
    media: dict[str, Any] | None = None,
    errors: tuple[int, ...] = (),
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Describe an endpoint for /openapi.json (read by `web.openapi.build`).

    `also`: other success statuses (with the same body) and when they happen; `media`: the
    success body's media types other than application/json, by type (a JSON schema each);
    `errors`: the statuses the route answers besides its success (401, 404 for path ids, 413
    and 422 for bodies are added by the builder).
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
