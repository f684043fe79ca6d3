"""What the control plane's routes read besides `web.io`: their services, their user, and
bodies within the configured limit."""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Any, TypedDict, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator
from starlette.requests import HTTPConnection, Request

from control_plane.models import User
from control_plane.services import Services
from web import io
from web.errors import NotFound, Unauthorized

M = TypeVar("M", bound=BaseModel)
_NUMBER = re.compile(r"[+-]?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?")


def _no_epoch(value: Any) -> Any:
    """pydantic also takes a number for a datetime, as seconds since 1970: `0.5` would quietly
    mean 1970 where the document says an ISO 8601 date-time."""
    if isinstance(value, (int, float)) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise ValueError("an ISO 8601 date-time is needed, e.g. 2026-01-31T12:00:00+00:00")
    return value


def _in_range(value: datetime) -> datetime:
    """A moment is stored and compared in UTC: one whose UTC time falls outside years 1 to
    9999 (`9999-12-31T23:00:00-10:00`) is refused here, not met by the store as a 500."""
    if value.tzinfo is not None:
        try:
            value.astimezone(UTC)
        except OverflowError:
            raise ValueError("out of range: its UTC time is not within years 1 to 9999") from None
    return value


#: A moment in a query: ISO 8601 text only.
Moment = Annotated[datetime, BeforeValidator(_no_epoch), AfterValidator(_in_range)]


class LifespanState(TypedDict):
    """What the lifespan yields; Starlette copies it into every request's scope."""

    services: Services


def services(conn: HTTPConnection) -> Services:
    return io.services(conn, Services)


async def user(request: Request) -> User:
    """The account of `Authorization: Bearer <API_KEY>` (SPEC 5); 401 for anything else."""
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("Authorization: Bearer <API_KEY> is required", scheme="Bearer")
    found = await services(request).accounts.by_key(key.strip())
    if found is None:
        raise Unauthorized("unknown API key", scheme="Bearer")
    return found


def operator(request: Request) -> None:
    """Let an operator's request through: `Authorization: Bearer <CONTROL_PLANE_OPERATOR_KEY>`,
    compared in constant time. Without that setting the operator's routes do not exist (404);
    a user's API key is not an operator's (401)."""
    expected = services(request).config.operator_key
    if not expected:
        raise NotFound("not found")
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        key.strip().encode(), expected.encode()
    ):
        raise Unauthorized("Authorization: Bearer <operator key> is required", scheme="Bearer")


def source(request: HTTPConnection) -> str:
    """Where a request came from, as the audit log keeps it: the client's address."""
    return request.client.host if request.client is not None else "unknown"


async def audit(
    request: Request,
    actor: User | str,
    action: str,
    target_kind: str,
    target_id: str | None,
    *,
    user_id: str | None = None,
    details: dict[str, Any] | None = None,
    secrets: Iterable[str] = (),
) -> None:
    """Record an act that succeeded (`control_plane.audit`): `actor` a user (the account it
    concerns unless `user_id` says) or a word (`operator`, `sandbox:<id>`)."""
    if isinstance(actor, User):
        user_id, actor = user_id or actor.id, actor.id
    await services(request).audit.record(
        actor=actor,
        action=action,
        target_kind=target_kind,
        target_id=target_id,
        source=source(request),
        user_id=user_id,
        details=details,
        secrets=secrets,
    )


def from_browser(request: Request) -> bool:
    """Whether a browser made this request: every browser sends `Sec-Fetch-Mode` (a header no
    page can set or remove). A browser is never given a sandbox's session key or address: it
    reaches sandboxes through /api/v1 only."""
    return "sec-fetch-mode" in request.headers


async def body(request: Request, model: type[M], limit: int | None = None) -> M:
    """The JSON body as `model`; no body at all leaves every field out."""
    return await io.read_body(
        request, model, empty={}, limit=limit or services(request).config.max_body_bytes
    )
