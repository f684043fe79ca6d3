"""/api/v1/app-conversations (SPEC 4.1, 4.2): start, poll, read, search, message, update, delete."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from control_plane.api import downloads
from control_plane.api.io import Moment, body, from_browser, services, user
from control_plane.api.paths import MADE_ID, path_uuid
from control_plane.app_conversations import AppConversation
from control_plane.models import ConversationFilters, ConversationRow, StartTaskStatus, TaskRow
from control_plane.start_request import NO_NUL, InitialMessage, StartRequest, Title
from web.io import doc, read_query, reply

M = TypeVar("M", bound=BaseModel)
#: The largest page of a search (SPEC 8 leaves it open; this is the documented limit).
MAX_PAGE = 100
TAG_KEY = r"^[a-z0-9_-]{1,50}$"


class StartTask(BaseModel):
    id: str
    status: StartTaskStatus
    detail: str | None
    app_conversation_id: str | None
    """Set once READY (SPEC 2.2)."""
    sandbox_id: str | None
    """Set once READY."""
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: TaskRow) -> StartTask:
        ready = row.status is StartTaskStatus.READY
        return cls(id=row.id, status=row.status, detail=row.detail,
                   app_conversation_id=row.app_conversation_id if ready else None,
                   sandbox_id=row.sandbox_id if ready else None,
                   created_at=row.created_at, updated_at=row.updated_at)


class TaskIds(BaseModel):
    ids: list[Annotated[str, Field(pattern=MADE_ID)]] = Field(min_length=1, max_length=100)


class ConversationIds(BaseModel):
    ids: list[Annotated[str, Field(pattern=MADE_ID)]] = Field(min_length=1, max_length=100)


class Search(BaseModel):
    title__contains: str | None = Field(default=None, max_length=200, pattern=NO_NUL)
    created_at__gte: Moment | None = None
    created_at__lt: Moment | None = None
    updated_at__gte: Moment | None = None
    updated_at__lt: Moment | None = None
    sandbox_id: str | None = Field(default=None, max_length=64)
    sort_order: Literal["CREATED_AT", "CREATED_AT_DESC", "UPDATED_AT", "UPDATED_AT_DESC",
                        "TITLE", "TITLE_DESC"] = "CREATED_AT_DESC"
    limit: int = Field(default=MAX_PAGE, ge=1, le=MAX_PAGE)
    page_id: str | None = Field(default=None, pattern=r"^[0-9]{1,9}$")

    @field_validator("created_at__gte", "created_at__lt", "updated_at__gte", "updated_at__lt")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("needs a UTC offset, e.g. 2026-01-31T12:00:00+00:00")
        return value

    def filters(self) -> ConversationFilters:
        return ConversationFilters(self.title__contains, self.created_at__gte,
                                   self.created_at__lt, self.updated_at__gte,
                                   self.updated_at__lt, self.sandbox_id)


class CountQuery(Search):
    pass


class Page(BaseModel):
    items: list[AppConversation]
    next_page_id: str | None


class Patch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: Title | None = None
    tags: dict[str, str] | None = Field(default=None, max_length=50)

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        import re

        for key, item in (value or {}).items():
            if not re.match(TAG_KEY, key) or len(item) > 256:
                raise ValueError(f"tag {key!r}: keys are 1-50 of a-z 0-9 _ -, values up to 256 characters")
        return value


class Ack(BaseModel):
    success: bool = True


class Deleted(BaseModel):
    success: bool = True
    sandbox_deleted: bool
    """True when this was the sandbox's last conversation and the sandbox went with it."""


class FileQuery(BaseModel):
    path: str = Field(min_length=1, max_length=4096)


class DiffQuery(BaseModel):
    path: str | None = Field(default=None, min_length=1, max_length=4096)


def shown(request: Request, records: list[AppConversation]) -> list[AppConversation]:
    """Without the sandbox's address and key when a browser asks (`io.from_browser`)."""
    if not from_browser(request):
        return records
    return [r.model_copy(update={"conversation_url": None, "session_api_key": None}) for r in records]


async def owned(request: Request, model: type[M] | None = None) -> tuple[ConversationRow, M | None]:
    """Auth, then input validation (422), then ownership (404)."""
    account = await user(request)
    conversation_id = path_uuid(request, "conversation_id")
    params = None if model is None else read_query(request, model)
    row = await services(request).conversations.owned(conversation_id, account.id)
    return row, params


@doc(summary="Start a conversation: answers at once with a start task", body=StartRequest,
     response=StartTask, status=201, errors=(404, 409, 410))
async def start(request: Request) -> Response:
    account = await user(request)
    task = await services(request).tasks.submit(account.id, await body(request, StartRequest))
    return reply(StartTask.of(task), 201)


@doc(summary="Start tasks by id (null for unknown ids)", query=TaskIds, response=list[StartTask | None])
async def start_tasks(request: Request) -> Response:
    account = await user(request)
    ids = read_query(request, TaskIds).ids
    found = await services(request).tasks.owned_many(ids, account.id)
    return reply([StartTask.of(found[i]) if i in found else None for i in ids])


@doc(summary="App conversations by id (null for unknown ids)", query=ConversationIds,
     response=list[AppConversation | None])
async def batch_get(request: Request) -> Response:
    account = await user(request)
    ids = read_query(request, ConversationIds).ids
    found = await services(request).conversations.owned_many(ids, account.id)
    records = {r.id: r for r in shown(request, found)}
    return reply([records.get(i) for i in ids])


@doc(summary=f"Search the user's conversations (at most {MAX_PAGE} a page)", query=Search,
     response=Page)
async def search(request: Request) -> Response:
    account = await user(request)
    params = read_query(request, Search)
    offset = int(params.page_id or 0)
    found, more = await services(request).conversations.search(
        account.id, params.filters(), order=params.sort_order, limit=params.limit, offset=offset)
    following = str(offset + params.limit) if more else None
    return reply(Page(items=shown(request, found), next_page_id=following))


class Count(BaseModel):
    count: int


@doc(summary="How many conversations match", query=CountQuery, response=Count)
async def count(request: Request) -> Response:
    account = await user(request)
    params = read_query(request, CountQuery)
    return reply(Count(count=await services(request).conversations.count(account.id,
                                                                         params.filters())))


@doc(summary="Send a follow-up message (a PAUSED sandbox is resumed first)", body=InitialMessage,
     response=Ack, errors=(404, 409, 410, 502))
async def send_message(request: Request) -> Response:
    row, _ = await owned(request)
    message = await body(request, InitialMessage)
    await services(request).conversations.send_message(row, message.model_dump())
    return reply(Ack())


@doc(summary="Update title and tags", body=Patch, response=AppConversation, errors=(404,))
async def patch(request: Request) -> Response:
    row, _ = await owned(request)
    change = await body(request, Patch)
    fields: dict[str, Any] = {k: getattr(change, k) for k in change.model_fields_set}
    svc = services(request)
    updated = await svc.conversations.update(row, fields)
    return reply(shown(request, [await svc.conversations.record(updated)])[0])


@doc(summary="Delete; the sandbox goes with its last conversation", response=Deleted, errors=(404,))
async def delete(request: Request) -> Response:
    row, _ = await owned(request)
    removed = await services(request).conversations.delete(row)
    return reply(Deleted(sandbox_deleted=removed))


@doc(summary="The trajectory (zip: events.jsonl, meta.json) from the control plane's own store",
     errors=(404,))
async def download(request: Request) -> Response:
    row, _ = await owned(request)
    await services(request).conversations.touch(row)  # a read is activity
    data = services(request).conversations.download(row)
    return StreamingResponse(data, media_type="application/zip", headers={
        "Content-Disposition": f'attachment; filename="conversation-{row.id}.zip"'})


async def _inspect(request: Request, row: ConversationRow, what: str,
                   params: dict[str, str]) -> Response:
    raw = await services(request).conversations.inspect(row, what, params)
    return Response(raw.content, status_code=raw.status, media_type=raw.media_type)


@doc(summary="A workspace file (read through the sandbox)", query=FileQuery,
     errors=(403, 404, 409, 410, 502))
async def file(request: Request) -> Response:
    row, params = await owned(request, FileQuery)
    assert params is not None
    raw = await services(request).conversations.inspect(row, "file", {"path": params.path})
    return downloads.served(raw, params.path)


@doc(summary="Git changes of the workspace", errors=(404, 409, 410, 502))
async def git_changes(request: Request) -> Response:
    return await _inspect(request, (await owned(request))[0], "git/changes", {})


@doc(summary="The Git diff (one file with ?path=, else the whole diff)", query=DiffQuery,
     errors=(404, 409, 410, 502))
async def git_diff(request: Request) -> Response:
    row, params = await owned(request, DiffQuery)
    assert params is not None
    return await _inspect(request, row, "git/diff", {"path": params.path} if params.path else {})


@doc(summary="Loaded skills", errors=(404, 409, 410, 502))
async def skills(request: Request) -> Response:
    return await _inspect(request, (await owned(request))[0], "skills", {})


@doc(summary="Configured hooks", errors=(404, 409, 410, 502))
async def hooks(request: Request) -> Response:
    return await _inspect(request, (await owned(request))[0], "hooks", {})
