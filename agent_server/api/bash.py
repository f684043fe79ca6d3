"""The OpenHands bash routes, for the host (/api/bash/...) and per conversation
(/api/conversations/{id}/bash/...): a command started in the background and its result
polled, or run at once. Same confinement, secrets and masking as .../commands."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import Response

from agent_server.agent.spec import Lenient
from agent_server.api.io import read_body, services
from agent_server.api.schemas import NO_NUL, PathText
from agent_server.api.workspace import git_author, scope
from agent_server.commands import MAX_KEPT, BashCommand, BashOutput
from web.errors import NotFound
from web.io import Success, doc, read_query, reply


class StartCommand(Lenient):
    command: str = Field(min_length=1, max_length=100_000, pattern=NO_NUL)
    """Run by `bash -c`; it may not hold NUL (a C string would end there: what runs would not
    be what is stored and shown)."""
    cwd: PathText | None = None
    """Relative to the working directory, or absolute inside it."""
    timeout: float = Field(default=300, gt=0, le=3600)
    """Seconds; then the command's whole process group is killed."""


class CommandSearch(Lenient):
    kind__eq: Literal["BashCommand", "BashOutput"] | None = None
    command_id__eq: str | None = Field(
        default=None, pattern=r"^[0-9a-fA-F]{8}-?(?:[0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}$"
    )
    """A command's id (a UUID, as the server makes them)."""
    order__gt: int | None = None
    sort_order: Literal["TIMESTAMP", "TIMESTAMP_DESC"] = "TIMESTAMP"
    limit: int = Field(default=100, ge=1, le=100)


class CommandPage(BaseModel):
    items: list[BashCommand | BashOutput]
    next_page_id: str | None = None


@doc(
    summary="Start a shell command in the background; poll bash_events/search for its "
    f"BashOutput (409 while {MAX_KEPT} of them are still running)",
    body=StartCommand,
    response=BashCommand,
    errors=(400, 403, 404, 409),
)
async def start(request: Request) -> Response:
    where = scope(request)
    body = await read_body(request, StartCommand)
    command = await services(request).commands.start(
        where, body.command, body.cwd, body.timeout, git=git_author(request)
    )
    return reply(command)


@doc(
    summary="Run a shell command to its end and answer its BashOutput",
    body=StartCommand,
    response=BashOutput,
    errors=(400, 403, 404, 409),
)
async def execute(request: Request) -> Response:
    where = scope(request)
    body = await read_body(request, StartCommand)
    return reply(
        await services(request).commands.run(
            where, body.command, body.cwd, body.timeout, git=git_author(request)
        )
    )


@doc(
    summary="Background commands and their results (a BashOutput once a command ended)",
    query=CommandSearch,
    response=CommandPage,
)
async def search(request: Request) -> Response:
    where = scope(request)
    query = read_query(request, CommandSearch)
    items = services(request).commands.search(
        where,
        kind=query.kind__eq,
        command_id=query.command_id__eq,
        order_gt=query.order__gt,
        descending=query.sort_order == "TIMESTAMP_DESC",
        limit=query.limit,
    )
    return reply(CommandPage(items=items))


@doc(
    summary="Stop a background command (its process group is killed); 404 for an unknown id",
    response=Success,
    errors=(404,),
)
async def stop(request: Request) -> Response:
    where = scope(request)
    command_id = request.path_params["command_id"]
    if not await services(request).commands.stop(where, command_id):
        raise NotFound(f"Command {command_id} not found")
    return reply(Success())


__all__ = ["execute", "search", "start", "stop"]
