"""/api/v1/app-conversations (SPEC 4.1, 4.2): start, poll, read, search, message, update, delete."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from control_plane.api import downloads
from control_plane.api.io import Moment, audit, body, from_browser, services, user
from control_plane.api.paths import MADE_ID, path_uuid
from control_plane.app_conversations import AppConversation
from control_plane.models import ConversationFilters, ConversationRow
from control_plane.start_request import NO_NUL, InitialMessage, StartRequest, Title
from web.errors import NotFound
from web.io import doc, read_query, reply

M = TypeVar("M", bound=BaseModel)
#: The largest page of a search (SPEC 8 leaves it open; this is the documented limit).
MAX_PAGE = 100
TAG_KEY = r"^[a-z0-9_-]{1,50}$"


class ConversationIds(BaseModel):
    ids: list[Annotated[str, Field(pattern=MADE_ID)]] = Field(min_length=1, max_length=100)


class Search(BaseModel):
    title__contains: str | None = Field(default=None, max_length=200, pattern=NO_NUL)
    created_at__gte: Moment | None = None
    created_at__lt: Moment | None = None
    updated_at__gte: Moment | None = None
    updated_at__lt: Moment | None = None
    sandbox_id: str | None = Field(default=None, max_length=64)
    sandbox_id__eq: str | None = Field(default=None, max_length=64)
    """The app server's name of `sandbox_id`."""
    include_sub_conversations: bool = True
    """False: sub-agents' conversations are left out (the app server leaves them out by default;
    here they are shown unless asked)."""
    sort_order: Literal[
        "CREATED_AT", "CREATED_AT_DESC", "UPDATED_AT", "UPDATED_AT_DESC", "TITLE", "TITLE_DESC"
    ] = "CREATED_AT_DESC"
    limit: int = Field(default=MAX_PAGE, ge=1, le=MAX_PAGE)
    page_id: str | None = Field(default=None, pattern=r"^[0-9]{1,9}$")

    @field_validator("created_at__gte", "created_at__lt", "updated_at__gte", "updated_at__lt")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("needs a UTC offset, e.g. 2026-01-31T12:00:00+00:00")
        return value

    def filters(self) -> ConversationFilters:
        return ConversationFilters(
            self.title__contains,
            self.created_at__gte,
            self.created_at__lt,
            self.updated_at__gte,
            self.updated_at__lt,
            self.sandbox_id__eq or self.sandbox_id,
            top_level=not self.include_sub_conversations,
        )


class CountQuery(Search):
    pass


class Page(BaseModel):
    items: list[AppConversation]
    next_page_id: str | None


class Patch(BaseModel):
    """Fields left out stay; the app server's `public`, `selected_repository`,
    `selected_branch` and `git_provider` are kept as given (the workspace is not changed)."""

    model_config = ConfigDict(extra="forbid")

    title: Title | None = None
    tags: dict[str, str] | None = Field(default=None, max_length=50)
    public: bool | None = None
    selected_repository: str | None = Field(default=None, max_length=201)
    selected_branch: str | None = Field(default=None, max_length=255)
    git_provider: str | None = Field(default=None, pattern=r"^[a-z_]{1,32}$")

    @field_validator("selected_repository")
    @classmethod
    def _repository(cls, value: str | None) -> str | None:
        return StartRequest._repository(value)

    @field_validator("selected_branch")
    @classmethod
    def _branch(cls, value: str | None) -> str | None:
        return StartRequest._branch(value)

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key, item in (value or {}).items():
            if not re.match(TAG_KEY, key) or len(item) > 256:
                raise ValueError(
                    f"tag {key!r}: keys are 1-50 of a-z 0-9 _ -, values up to 256 characters"
                )
        return value


class Ack(BaseModel):
    success: bool = True


class Deleted(BaseModel):
    success: bool = True
    sandbox_deleted: bool
    """True when this was the sandbox's last conversation and the sandbox went with it."""


class FileQuery(BaseModel):
    path: str | None = Field(default=None, min_length=1, max_length=4096)
    """The file's bytes; 404 when there is none."""
    file_path: str | None = Field(default=None, min_length=1, max_length=4096)
    """The app server's form (when `path` is not given): the text as a JSON string, `""` when
    there is no such file. With neither, there is no file to read: 404."""
    scope: Literal["conversation", "sandbox"] = "conversation"
    """Where `path` is read: the conversation's directory, or (`sandbox`) the whole workspace
    of its sandbox."""


class DiffQuery(BaseModel):
    path: str | None = Field(default=None, min_length=1, max_length=4096)


class HookMatcher(BaseModel):
    matcher: str
    hooks: list[dict[str, Any]]


class HookEvent(BaseModel):
    event_type: str
    """snake_case: pre_tool_use, post_tool_use, user_prompt_submit, session_start, ..."""
    matchers: list[HookMatcher]


class Hooks(BaseModel):
    hooks: list[HookEvent]

    @classmethod
    def of(cls, config: dict[str, Any]) -> Hooks:
        """The agent server's `{PreToolUse: [{matcher, hooks}], ...}`, event types with hooks."""
        events = []
        for name, groups in config.items():
            if isinstance(groups, list) and groups:
                snake = re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()
                events.append(
                    HookEvent(
                        event_type=snake,
                        matchers=[
                            HookMatcher(
                                matcher=str(g.get("matcher", "*")), hooks=list(g.get("hooks") or [])
                            )
                            for g in groups
                            if isinstance(g, dict)
                        ],
                    )
                )
        return cls(hooks=events)


def shown(request: Request, records: list[AppConversation]) -> list[AppConversation]:
    """Without the sandbox's address and key when a browser asks (`io.from_browser`)."""
    if not from_browser(request):
        return records
    return [
        r.model_copy(update={"conversation_url": None, "session_api_key": None}) for r in records
    ]


async def owned(request: Request, model: type[M] | None = None) -> tuple[ConversationRow, M | None]:
    """Auth, then input validation (422), then ownership (404)."""
    account = await user(request)
    conversation_id = path_uuid(request, "conversation_id")
    params = None if model is None else read_query(request, model)
    row = await services(request).conversations.owned(conversation_id, account.id)
    return row, params


@doc(
    summary="App conversations by id (null for unknown ids)",
    query=ConversationIds,
    response=list[AppConversation | None],
)
async def batch_get(request: Request) -> Response:
    account = await user(request)
    ids = read_query(request, ConversationIds).ids
    found = await services(request).conversations.owned_many(ids, account.id)
    records = {r.id: r for r in shown(request, found)}
    return reply([records.get(i) for i in ids])


@doc(
    summary=f"Search the user's conversations (at most {MAX_PAGE} a page)",
    query=Search,
    response=Page,
)
async def search(request: Request) -> Response:
    account = await user(request)
    params = read_query(request, Search)
    offset = int(params.page_id or 0)
    found, more = await services(request).conversations.search(
        account.id, params.filters(), order=params.sort_order, limit=params.limit, offset=offset
    )
    following = str(offset + params.limit) if more else None
    return reply(Page(items=shown(request, found), next_page_id=following))


@doc(
    summary="How many conversations match (a bare integer, as the app server answers)",
    query=CountQuery,
    response=int,
)
async def count(request: Request) -> Response:
    account = await user(request)
    params = read_query(request, CountQuery)
    return reply(await services(request).conversations.count(account.id, params.filters()))


@doc(
    summary="Send a follow-up message (a PAUSED sandbox is resumed first)",
    body=InitialMessage,
    response=Ack,
    errors=(404, 409, 410, 502),
)
async def send_message(request: Request) -> Response:
    row, _ = await owned(request)
    message = await body(request, InitialMessage)
    await services(request).conversations.send_message(row, message.model_dump())
    return reply(Ack())


@doc(
    summary="Update title, tags and the app server's metadata",
    body=Patch,
    response=AppConversation,
    errors=(404,),
)
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
    owner = row.user_id
    details = {"sandbox_id": row.sandbox_id, "sandbox_deleted": removed}
    await audit(
        request,
        owner,
        "conversation.delete",
        "conversation",
        row.id,
        user_id=owner,
        details=details,
    )
    if removed:  # with its last conversation, the sandbox
        await audit(request, owner, "sandbox.delete", "sandbox", row.sandbox_id, user_id=owner)
    return reply(Deleted(sandbox_deleted=removed))


@doc(
    summary="The trajectory (zip: events.jsonl, meta.json) from the control plane's own store",
    errors=(404,),
)
async def download(request: Request) -> Response:
    row, _ = await owned(request)
    await services(request).conversations.touch(row)  # a read is activity
    data = services(request).conversations.download(row)
    return StreamingResponse(
        data,
        media_type="application/zip",
        headers={"Content-Disposition": f'attachment; filename="conversation-{row.id}.zip"'},
    )


async def _inspect(
    request: Request, row: ConversationRow, what: str, params: dict[str, str]
) -> Response:
    raw = await services(request).conversations.inspect(row, what, params)
    return Response(raw.content, status_code=raw.status, media_type=raw.media_type)


@doc(
    summary="A workspace file (read through the sandbox): its bytes for path=, its text as "
    'a JSON string for file_path= ("" when missing)',
    query=FileQuery,
    errors=(403, 404, 409, 410, 502),
)
async def file(request: Request) -> Response:
    row, params = await owned(request, FileQuery)
    assert params is not None
    if params.path is None and params.file_path is None:
        raise NotFound("no file named: give path (its bytes) or file_path (its text as JSON)")
    if params.path is not None and params.scope == "sandbox":  # the sandbox's whole workspace
        raw = await services(request).conversations.inspect_sandbox(
            row, "file", {"path": params.path}
        )
        return downloads.served(raw, params.path, downloads.OUTSIDE_SANDBOX)
    if params.path is not None:  # its bytes, as a download (never rendered on this origin)
        raw = await services(request).conversations.inspect(row, "file", {"path": params.path})
        return downloads.served(raw, params.path)
    raw = await services(request).conversations.inspect(
        row, "file", {"path": in_conversation(row.working_dir, params.file_path or "")}
    )
    if raw.status == 404:
        return _json_text("")
    if raw.status >= 400:
        return Response(raw.content, status_code=raw.status, media_type=raw.media_type)
    return _json_text(raw.content.decode(errors="replace"))


def in_conversation(working_dir: str | None, raw: str) -> str:
    """The app server's conversations all work in the sandbox's /workspace/project, ours each in
    a directory of its own below it: a path under the sandbox's workspace but outside the
    conversation's directory (the frontend's `/workspace/project/.agents_tmp/PLAN.md`) is read
    in the conversation's. The agent server confines the result as always."""
    if not working_dir:
        return raw
    own, path = PurePosixPath(working_dir), PurePosixPath(raw)
    if path.is_absolute() and not path.is_relative_to(own) and path.is_relative_to(own.parent):
        return str(own / path.relative_to(own.parent))
    return raw


def _json_text(text: str) -> Response:
    return Response(json.dumps(text, ensure_ascii=False), media_type="application/json")


@doc(summary="Git changes of the workspace", errors=(404, 409, 410, 502))
async def git_changes(request: Request) -> Response:
    return await _inspect(request, (await owned(request))[0], "git/changes", {})


@doc(
    summary="The Git diff (one file with ?path=, else the whole diff)",
    query=DiffQuery,
    errors=(404, 409, 410, 502),
)
async def git_diff(request: Request) -> Response:
    row, params = await owned(request, DiffQuery)
    assert params is not None
    return await _inspect(request, row, "git/diff", {"path": params.path} if params.path else {})


@doc(summary="Loaded skills", errors=(404, 409, 410, 502))
async def skills(request: Request) -> Response:
    return await _inspect(request, (await owned(request))[0], "skills", {})


@doc(
    summary="Configured hooks, by event type (the app server's shape)",
    response=Hooks,
    errors=(404, 409, 410, 502),
)
async def hooks(request: Request) -> Response:
    row = (await owned(request))[0]
    raw = await services(request).conversations.inspect(row, "hooks", {})
    if raw.status != 200:
        return Response(raw.content, status_code=raw.status, media_type=raw.media_type)
    return reply(Hooks.of(json.loads(raw.content)))
