"""/api/conversations/{id}/file, /git/changes, /git/diff, /commands: the workspace's work.

Paths are confined to the conversation's working directory (403 when they leave it);
missing is 404, a directory where a file was asked for is 400, over the size cap is 413.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from urllib.parse import quote

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from agent_server import git
from agent_server.git import GitChange, GitDiff
from agent_server.agent.toolbox import git_env
from agent_server.api.io import conversation, doc, read_body, read_query, reply, services
from agent_server.errors import PayloadTooLarge, invalid
from agent_server.api.schemas import (
    CommandResult,
    DiffQuery,
    FileQuery,
    FileWritten,
    RunCommand,
)
from agent_server.workspace import (
    FileMissing,
    NotAFile,
    TooLarge,
    masked_keep,
    open_file,
    output_text,
    relative,
    resolve,
    write_file,
)
from core.processes import CHUNK, MAX_OUTPUT_BYTES, child_env, run_process

#: Room for multipart boundaries and part headers on top of the file's own cap.
MULTIPART_OVERHEAD = 64 * 1024
#: Said (in the X-Detail header) when the answer is empty because there is no repository:
#: the body stays a plain list, as OpenHands clients expect.
NO_REPOSITORY = "The working directory holds no Git repository (looked up to 3 levels deep)."


def _max_bytes(request: Request) -> int:
    return services(request).config.max_file_bytes


# -- files -----------------------------------------------------------------------------------


@doc(summary="A workspace file, streamed with a guessed content type", query=FileQuery,
     media={"*/*": {"type": "string", "format": "binary"}}, errors=(400, 403, 404, 413))
async def get_file(request: Request) -> Response:
    conv = conversation(request)
    query = read_query(request, FileQuery)
    opened = await asyncio.to_thread(open_file, conv.working_dir, query.path,
                                     _max_bytes(request))
    return StreamingResponse(opened.stream(), media_type=opened.media_type, headers={
        "Content-Length": str(opened.size),
        "Content-Disposition": f"attachment; filename*=UTF-8''{quote(opened.path.name)}",
        "X-Content-Type-Options": "nosniff",
    })


@doc(summary="Upload a workspace file (raw body, or multipart/form-data with a `file` part); "
             "parent directories are created", query=FileQuery, response=FileWritten,
     errors=(400, 403, 404, 413))
async def upload_file(request: Request) -> Response:
    conv = conversation(request)
    query = read_query(request, FileQuery)
    limit = _max_bytes(request)
    multipart = request.headers.get("content-type", "").startswith("multipart/form-data")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit + (MULTIPART_OVERHEAD if multipart else 0):
        raise PayloadTooLarge(f"the upload is over the limit of {limit} bytes")
    resolve(conv.working_dir, query.path)  # refuse before reading a byte of the body
    if multipart:
        upload = await _multipart_file(request, limit)
        try:
            path, size = await write_file(conv.working_dir, query.path, _read(upload), limit)
        finally:
            await upload.close()
    else:
        path, size = await write_file(conv.working_dir, query.path, request.stream(), limit)
    return reply(FileWritten(path=relative(conv.working_dir, path), size=size))


async def _multipart_file(request: Request, limit: int) -> UploadFile:
    parser = MultiPartParser(request.headers, _capped(request.stream(), limit + MULTIPART_OVERHEAD),
                             max_files=1, max_fields=20)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise invalid(["body"], exc.message, "multipart_invalid") from None
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        await form.close()
        raise invalid(["body", "file"], "Field required: a file part named `file`", "missing")
    return upload


async def _capped(stream: AsyncIterator[bytes], limit: int) -> AsyncGenerator[bytes, None]:
    total = 0
    async for chunk in stream:
        total += len(chunk)
        if total > limit:
            raise TooLarge(f"the upload is over the limit of {limit} bytes", limit)
        yield chunk


async def _read(upload: UploadFile) -> AsyncIterator[bytes]:
    while chunk := await upload.read(CHUNK):
        yield chunk


# -- git -------------------------------------------------------------------------------------


@doc(summary="Changes against HEAD ([{path, status}], untracked included); without a "
             "repository an empty list and an X-Detail header", response=list[GitChange],
     errors=(404,))
async def git_changes(request: Request) -> Response:
    conv = conversation(request)
    items, repos = await git.changes(conv.working_dir)
    return JSONResponse([i.model_dump(mode="json") for i in items],
                        headers={} if repos else {"X-Detail": NO_REPOSITORY})


@doc(summary="One file's {path, original, modified}; without path the whole unified diff "
             "(text/plain)", query=DiffQuery, response=GitDiff,
     media={"text/plain": {"type": "string"}}, errors=(400, 403, 404, 413))
async def git_diff(request: Request) -> Response:
    conv = conversation(request)
    query = read_query(request, DiffQuery)
    if query.path is not None:
        return reply(await git.file_diff(conv.working_dir, query.path, _max_bytes(request)))
    repos = await asyncio.to_thread(git.find_repositories, conv.working_dir)
    if not repos:
        return Response("", media_type="text/plain", headers={"X-Detail": NO_REPOSITORY})
    return StreamingResponse(git.unified_diff(repos, _max_bytes(request)),
                             media_type="text/plain; charset=utf-8")


# -- commands --------------------------------------------------------------------------------


@doc(summary="Run a shell command in the workspace (set-up work), secrets in its environment "
             "and masked in its output", body=RunCommand, response=CommandResult,
     errors=(400, 403, 404))
async def run_command(request: Request) -> Response:
    conv = conversation(request)
    body = await read_body(request, RunCommand)
    cwd = resolve(conv.working_dir, body.cwd or ".")
    if not await asyncio.to_thread(cwd.exists):
        raise FileMissing(f"cwd {body.cwd or conv.working_dir!s} does not exist")
    if not await asyncio.to_thread(cwd.is_dir):
        raise NotAFile(f"cwd {body.cwd!r} is not a directory")
    settings = services(request).settings.get()
    env = child_env(git_env(settings.git_user_name, settings.git_user_email),
                    conv.secret_values, body.env)
    done = await run_process(["bash", "-c", body.command], cwd, env, body.timeout,
                             keep=masked_keep(conv.secret_values))
    return reply(CommandResult(
        exit_code=done.exit_code,
        stdout=output_text(done.stdout, MAX_OUTPUT_BYTES, conv.masker),
        stderr=output_text(done.stderr, MAX_OUTPUT_BYTES, conv.masker),
        timed_out=done.timed_out,
    ))
