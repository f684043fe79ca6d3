"""GET /api/v1/conversation/{id}/events/search and /count: the events stored from the webhook,
with the agent server's filters (SPEC 4.1: note the singular 'conversation')."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError, field_validator
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from control_plane.api.io import Moment, services, user
from control_plane.api.paths import path_uuid
from control_plane.models import EventFilters
from events.kinds import KindName
from web.errors import from_pydantic
from web.io import doc, located, read_query, reply

M = TypeVar("M", bound=BaseModel)
Source = Literal["agent", "user", "environment", "hook"]


class EventSearch(BaseModel):
    kind__eq: KindName | None = None
    source__eq: Source | None = None
    timestamp__gte: Moment | None = None
    timestamp__lt: Moment | None = None
    sort_order: Literal["TIMESTAMP", "TIMESTAMP_DESC"] = "TIMESTAMP"
    limit: int = Field(default=100, ge=1, le=1000)
    page_id: str | None = Field(default=None, pattern=r"^[0-9]{1,18}$")

    @field_validator("timestamp__gte", "timestamp__lt")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("timestamp needs a UTC offset, e.g. 2026-01-31T12:00:00+00:00")
        return value

    def filters(self) -> EventFilters:
        def text(moment: datetime | None) -> str | None:
            # The stored form of the event schema: UTC, microseconds, explicit offset.
            return (
                None
                if moment is None
                else moment.astimezone(UTC).isoformat(timespec="microseconds")
            )

        return EventFilters(
            self.kind__eq, self.source__eq, text(self.timestamp__gte), text(self.timestamp__lt)
        )


class EventCount(BaseModel):
    kind__eq: KindName | None = None
    source__eq: Source | None = None


class EventPage(BaseModel):
    items: list[dict[str, object]]
    next_page_id: str | None


async def _conversation_id(request: Request, model: type[M]) -> tuple[str, M]:
    """Auth, then input validation (422), then ownership (404)."""
    account = await user(request)
    conversation_id = path_uuid(request, "conversation_id")
    params = read_query(request, model)
    records = services(request).conversations
    await records.touch(await records.owned(conversation_id, account.id))  # a read is activity
    return conversation_id, params


@doc(
    summary=(
        "Search stored events (kind__eq, source__eq, timestamp range, sort_order, limit, page_id)"
    ),
    query=EventSearch,
    response=EventPage,
    errors=(404,),
)
async def search(request: Request) -> Response:
    conversation_id, params = await _conversation_id(request, EventSearch)
    bodies, following = await services(request).transcripts.search(
        conversation_id,
        params.filters(),
        descending=params.sort_order == "TIMESTAMP_DESC",
        limit=params.limit,
        page=int(params.page_id) if params.page_id else None,
    )
    # Stored bodies are JSON already: spliced, not parsed and dumped again.
    text = (
        '{"items":['
        + ",".join(bodies)
        + '],"next_page_id":'
        + json.dumps(None if following is None else str(following))
        + "}"
    )
    return Response(text, media_type="application/json")


@doc(
    summary="Count stored events (a bare integer, as the OpenHands app server answers)",
    query=EventCount,
    response=int,
    errors=(404,),
)
async def count(request: Request) -> Response:
    conversation_id, params = await _conversation_id(request, EventCount)
    total = await services(request).transcripts.count(
        conversation_id, EventFilters(params.kind__eq, params.source__eq)
    )
    return reply(total)


EventId = Annotated[str, Field(min_length=1, max_length=64)]


class StreamQuery(BaseModel):
    last_event_id: EventId | None = None
    """Resume after this event (the `Last-Event-ID` header says the same and wins)."""


class StreamHeaders(BaseModel):
    """The header a browser's EventSource sends when it reconnects: the same bounds as the query
    parameter, so a bad one is a 422 too (an empty one is no header)."""

    last_event_id: EventId | None = Field(default=None, alias="last-event-id")


@doc(
    summary="Follow the stored events live (text/event-stream): each frame's id is the event's "
    "id and its data the event; resume after an id with Last-Event-ID. Streaming text (the "
    "llm_stream setting) comes as `event: delta` frames with no id, live only",
    query=StreamQuery,
    errors=(404,),
)
async def stream(request: Request) -> Response:
    conversation_id, params = await _conversation_id(request, StreamQuery)
    transcripts = services(request).transcripts
    try:
        header = StreamHeaders.model_validate(
            {"last-event-id": request.headers.get("last-event-id") or None}
        ).last_event_id
    except ValidationError as exc:
        raise from_pydantic(exc, "header") from None
    last = header or params.last_event_id
    after = 0
    if last:
        with located(*(("header", "last-event-id") if header else ("query", "last_event_id"))):
            after = await transcripts.position(conversation_id, last)
    return StreamingResponse(
        transcripts.follow(conversation_id, after),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
