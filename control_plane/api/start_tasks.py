"""Starting conversations (SPEC 2.2, 2.5, 3.4): POST /api/v1/app-conversations, the stream
form of it, and reading start tasks back (by id, searched, counted).

The task record carries the OpenHands app server's fields where the SPEC is silent
(`created_by_user_id`, `agent_server_url`, `request` with its secret values masked).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from control_plane.api.io import Moment, audit, body, from_browser, services, user
from control_plane.api.paths import MADE_ID
from control_plane.models import StartTaskStatus, TaskRow, User
from control_plane.start_request import StartRequest
from web.io import doc, read_query, reply

MAX_PAGE = 100
#: How long a stream-start answer stays open at most (a start waits for a sandbox, and for a
#: clone with a repository); the client then reads the task by id.
STREAM_SECONDS = 900.0


class StartTask(BaseModel):
    id: str
    created_by_user_id: str
    status: StartTaskStatus
    detail: str | None
    app_conversation_id: str | None
    """Set once READY (SPEC 2.2)."""
    sandbox_id: str | None
    """Set once READY."""
    agent_server_url: str | None = None
    """The sandbox's agent server once READY, while it runs (never to a browser)."""
    request: dict[str, Any] = Field(default_factory=dict)
    """The start request as sent, its secret values masked."""
    created_at: datetime
    updated_at: datetime


class TaskIds(BaseModel):
    ids: list[Annotated[str, Field(pattern=MADE_ID)]] = Field(min_length=1, max_length=100)


class TaskFilters(BaseModel):
    conversation_id__eq: str | None = Field(default=None, pattern=MADE_ID)
    created_at__gte: Moment | None = None

    @field_validator("created_at__gte")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("needs a UTC offset, e.g. 2026-01-31T12:00:00+00:00")
        return value


class TaskSearch(TaskFilters):
    sort_order: Literal["CREATED_AT", "CREATED_AT_DESC", "UPDATED_AT", "UPDATED_AT_DESC"] = (
        "CREATED_AT_DESC"
    )
    limit: int = Field(default=MAX_PAGE, ge=1, le=MAX_PAGE)
    page_id: str | None = Field(default=None, pattern=r"^[0-9]{1,9}$")


class TaskPage(BaseModel):
    items: list[StartTask]
    next_page_id: str | None


async def view(request: Request, row: TaskRow) -> StartTask:
    svc = services(request).tasks
    ready = row.status is StartTaskStatus.READY
    url = None if from_browser(request) else await svc.agent_server_url(row)
    return StartTask(
        id=row.id,
        created_by_user_id=row.user_id,
        status=row.status,
        detail=row.detail,
        app_conversation_id=row.app_conversation_id if ready else None,
        sandbox_id=row.sandbox_id if ready else None,
        agent_server_url=url,
        request=svc.request_of(row),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


@doc(
    summary="Start a conversation: answers at once with a start task",
    body=StartRequest,
    response=StartTask,
    status=201,
    errors=(404, 409, 410),
)
async def start(request: Request) -> Response:
    account = await user(request)
    asked = await body(request, StartRequest)
    task = await services(request).tasks.submit(account.id, asked)
    await _audit(request, account, task, asked)
    return reply(await view(request, task), 201)


async def _audit(request: Request, account: User, task: TaskRow, asked: StartRequest) -> None:
    """A start in the audit log: the sandbox it names, if any (its placement may make one)."""
    await audit(
        request,
        account,
        "conversation.start",
        "start_task",
        task.id,
        details={"sandbox_id": asked.sandbox_id},
    )


@doc(
    summary="Start a conversation and stream its start task: a JSON array, one element per "
    f"stage, closed at READY or ERROR (or after {STREAM_SECONDS:g} s)",
    body=StartRequest,
    response=list[StartTask],
    errors=(404, 409, 410),
)
async def stream_start(request: Request) -> Response:
    account = await user(request)
    asked = await body(request, StartRequest)
    task = await services(request).tasks.submit(account.id, asked)
    await _audit(request, account, task, asked)
    return StreamingResponse(_stages(request, task), media_type="application/json")


async def _stages(request: Request, task: TaskRow) -> AsyncIterator[str]:
    yield "[\n" + (await view(request, task)).model_dump_json()
    async for moved in services(request).tasks.follow(task, STREAM_SECONDS):
        yield ",\n" + (await view(request, moved)).model_dump_json()
    yield "\n]"


@doc(
    summary="Start tasks by id (null for unknown ids)",
    query=TaskIds,
    response=list[StartTask | None],
)
async def batch_get(request: Request) -> Response:
    account = await user(request)
    ids = read_query(request, TaskIds).ids
    found = await services(request).tasks.owned_many(ids, account.id)
    views = {i: await view(request, row) for i, row in found.items()}
    return reply([views.get(i) for i in ids])


@doc(
    summary=f"Search the user's start tasks (at most {MAX_PAGE} a page)",
    query=TaskSearch,
    response=TaskPage,
)
async def search(request: Request) -> Response:
    account = await user(request)
    params = read_query(request, TaskSearch)
    offset = int(params.page_id or 0)
    found, more = await services(request).tasks.search(
        account.id,
        created_at_gte=params.created_at__gte,
        conversation_id=params.conversation_id__eq,
        order=params.sort_order,
        limit=params.limit,
        offset=offset,
    )
    return reply(
        TaskPage(
            items=[await view(request, row) for row in found],
            next_page_id=str(offset + params.limit) if more else None,
        )
    )


@doc(
    summary="How many start tasks match (a bare integer, as the app server answers)",
    query=TaskFilters,
    response=int,
)
async def count(request: Request) -> Response:
    account = await user(request)
    params = read_query(request, TaskFilters)
    total = await services(request).tasks.count(
        account.id,
        created_at_gte=params.created_at__gte,
        conversation_id=params.conversation_id__eq,
    )
    return reply(total)
