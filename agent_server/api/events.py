"""/api/conversations/{id}/events: search, count, one event, and sending a message.

Search answers with the stored JSON lines as they are: no event is parsed to be returned.
"""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import Response

from agent_server.api.io import conversation, read_body
from agent_server.api.schemas import EventPage, EventSearch
from agent_server.log import EventLog, Query
from agent_server.record import SendMessage
from web.errors import NotFound
from web.io import doc, read_query, reply


def _query(params: EventSearch, log: EventLog) -> Query:
    """The log's query; an unknown branch event is a 404, as `navigate` answers for it."""
    if (
        params.branch is not None
        and params.branch != "head"
        and log.position(params.branch) is None
    ):
        raise NotFound(f"Event {params.branch} not found in this conversation")
    return Query(
        branch=(log.head or "") if params.branch == "head" else params.branch,
        kind=params.kind__eq or params.kind,
        source=params.source__eq or params.source,
        timestamp_gte=params.timestamp__gte,
        timestamp_lt=params.timestamp__lt,
        descending=params.sort_order == "TIMESTAMP_DESC",
        body=params.body,
    )


@doc(summary="Search a conversation's events", query=EventSearch, response=EventPage, errors=(404,))
async def search(request: Request) -> Response:
    params = read_query(request, EventSearch)
    log = await conversation(request).log()
    lines, next_id = log.search(_query(params, log), params.limit, params.page_id)
    body = (
        b'{"items":['
        + b",".join(lines)
        + b'],"next_page_id":'
        + json.dumps(next_id).encode()
        + b"}"
    )
    return Response(body, media_type="application/json")


@doc(summary="Count a conversation's events", query=EventSearch, response=int, errors=(404,))
async def count(request: Request) -> Response:
    params = read_query(request, EventSearch)
    log = await conversation(request).log()
    return reply(log.count(_query(params, log)))


@doc(summary="One event by id", response=dict, errors=(404,))
async def get(request: Request) -> Response:
    log = await conversation(request).log()
    line = log.get(request.path_params["event_id"])
    if line is None:
        raise NotFound(f"Event {request.path_params['event_id']} not found")
    return Response(line, media_type="application/json")


@doc(
    summary="Send a user message; with run, the agent starts",
    body=SendMessage,
    response=dict,
    errors=(404,),
)
async def send(request: Request) -> Response:
    conv = conversation(request)
    message = await read_body(request, SendMessage)
    event = await conv.send_message(message)
    return Response(event.model_dump_json(), media_type="application/json")


__all__ = ["count", "get", "search", "send"]
