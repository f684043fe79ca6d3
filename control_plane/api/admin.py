"""The operator's routes under /api/v1/admin: the audit log (`control_plane.audit`).

They take the operator's key (`CONTROL_PLANE_OPERATOR_KEY`, `io.operator`), never a user's:
a user's key is answered 401, and without that setting the routes do not exist (404). The
same log is read on the database's machine with `control-plane audit`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, field_validator
from starlette.requests import Request
from starlette.responses import Response

from control_plane.api.io import Moment, operator, services
from control_plane.audit import AuditQuery
from web.io import doc, read_query, reply

MAX_PAGE = 100
#: Text a filter may hold: no control characters (PostgreSQL refuses a NUL in text).
PRINTABLE = r"^[^\x00-\x1f\x7f]+$"


class AuditSearch(BaseModel):
    user: str | None = Field(default=None, max_length=200, pattern=PRINTABLE)
    """A user's id or name: the acts it did and those done to its things."""
    action: str | None = Field(default=None, max_length=65, pattern=PRINTABLE)
    """An action (`sandbox.delete`), or a prefix of one and `*` (`sandbox.*`)."""
    actor: str | None = Field(default=None, max_length=80, pattern=PRINTABLE)
    """Who acted: a user's id, `operator`, `cli`, `system`, `sandbox:<id>`."""
    target_id: str | None = Field(default=None, max_length=255, pattern=PRINTABLE)
    since: Moment | None = None
    """At or after (ISO 8601 with an offset)."""
    until: Moment | None = None
    """Before."""
    limit: int = Field(default=MAX_PAGE, ge=1, le=MAX_PAGE)
    page_id: str | None = Field(default=None, pattern=r"^[0-9]{1,18}$")
    """Opaque: the next_page_id of the previous page."""

    @field_validator("since", "until")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("needs a UTC offset, e.g. 2026-01-31T12:00:00+00:00")
        return value


class AuditRecord(BaseModel):
    """One act: who (`actor`), what (`action` on `target_kind` `target_id`, for the account
    `user_id`), when (`at`) and from where (`source`: the client's address, `cli`, or the
    control-plane process for `system`). Never a secret's value or a key."""

    id: str
    at: datetime
    actor: str
    action: str
    target_kind: str
    target_id: str | None
    user_id: str | None
    source: str
    details: dict[str, Any] | None


class AuditPage(BaseModel):
    items: list[AuditRecord]
    """Newest first."""
    next_page_id: str | None


@doc(
    summary="The audit log, newest first (the operator's key, CONTROL_PLANE_OPERATOR_KEY; "
    "404 without that setting)",
    query=AuditSearch,
    response=AuditPage,
    errors=(404,),
)
async def audit(request: Request) -> Response:
    operator(request)
    params = read_query(request, AuditSearch)
    asked = AuditQuery(
        user=params.user,
        action=params.action,
        actor=params.actor,
        target_id=params.target_id,
        since=params.since,
        until=params.until,
        before_seq=int(params.page_id) if params.page_id else None,
    )
    found = await services(request).audit.search(asked, params.limit + 1)
    page = found[: params.limit]
    return reply(
        AuditPage(
            items=[
                AuditRecord(
                    id=e.id,
                    at=e.at,
                    actor=e.actor,
                    action=e.action,
                    target_kind=e.target_kind,
                    target_id=e.target_id,
                    user_id=e.user_id,
                    source=e.source,
                    details=e.details,
                )
                for e in page
            ],
            next_page_id=str(page[-1].seq) if len(found) > params.limit else None,
        )
    )
