"""Workspace routes: files, Git changes and diffs, commands; per conversation
(/api/conversations/{id}/file, /git/..., /commands, and the OpenHands names /file/upload,
/file/download, /bash/...) and for the host (/api/file/..., /api/git/..., /api/bash/...).

One implementation behind both: a request's `Scope` says what it may touch. Paths are confined
to the conversation's working directory, or for the host to the server's default working
directory and the conversations' (403 when they leave it); missing is 404, a directory where a
file was asked for is 400, over the size cap is 413. Commands get the conversation's secrets
(the host's: the settings'), masked in their output.
"""

from __future__ import annotations

import asyncio
import os
from collections import ChainMap
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from urllib.parse import quote

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from agent_server import git
from agent_server.api.io import conversation, read_body, services
from agent_server.api.schemas import (
    ChangesQuery,
    CommandResult,
    DiffQuery,
    FileEntry,
    FileListing,
    FileQuery,
    FileUploaded,
    FileWritten,
    ListQuery,
    RunCommand,
)
from agent_server.git import GitChange, GitDiff
from agent_server.workspace import Scope, TooLarge, open_file, relative, write_file
from core.masking import Masker
from core.processes import CHUNK
from web.errors import PayloadTooLarge, invalid
from web.io import doc, read_query, reply

#: Room for multipart boundaries and part headers on top of the file's own cap.
MULTIPART_OVERHEAD = 64 * 1024
#: Said (in the X-Detail header) when the answer is empty because there is no repository:
#: the body stays a plain list, as OpenHands clients expect.
NO_REPOSITORY = "The working directory holds no Git repository (looked up to 3 levels deep)."


def _max_bytes(request: Request) -> int:
    return services(request).config.max_file_bytes


def scope(request: Request) -> Scope:
    """The conversation's workspace on its routes; the host's on /api/file, /git, /bash."""
    if "conversation_id" in request.path_params:
        conv = conversation(request)
        return Scope(conv.id, (conv.working_dir,), conv.secret_values, conv.masker)
    state = services(request)
    catalogue = state.conversations
    roots = dict.fromkeys([catalogue.default_working_dir, *(c.working_dir for c in catalogue)])
    secrets = state.settings.get().secrets
    return Scope("host", tuple(roots), secrets, Masker(ChainMap(secrets, dict(catalogue.hidden))))


def git_author(request: Request) -> dict[str, str]:
    return services(request).settings.get().git_author()


# -- files -----------------------------------------------------------------------------------


@doc(
    summary="A workspace file, streamed with a guessed content type",
    query=FileQuery,
    media={"*/*": {"type": "string", "format": "binary"}},
    errors=(400, 403, 404, 409, 413),
)
async def get_file(request: Request) -> Response:
    where = scope(request)
    query = read_query(request, FileQuery)
    opened = await asyncio.to_thread(
        open_file, where.root_for(query.path), query.path, _max_bytes(request)
    )
    return StreamingResponse(
        opened.stream(),
        media_type=opened.media_type,
        headers={
            "Content-Length": str(opened.size),
            "Content-Disposition": f"attachment; filename*=UTF-8''{quote(opened.path.name)}",
            "X-Content-Type-Options": "nosniff",
        },
    )


#: Entries of one directory listed at most (a huge directory is cut, and says so).
MAX_ENTRIES = 1000


@doc(
    summary="The entries of a workspace directory (the console's file browser)",
    query=ListQuery,
    response=FileListing,
    errors=(400, 403, 404, 409),
)
async def list_files(request: Request) -> Response:
    where = scope(request)
    query = read_query(request, ListQuery)
    root = where.root_for(query.path) if query.path else where.home
    directory = await where.directory(query.path, "path")
    return reply(await asyncio.to_thread(_listing, root, directory))


def _listing(root: Path, directory: Path) -> FileListing:
    entries: list[FileEntry] = []
    truncated = False
    base = relative(root, directory)
    with os.scandir(directory) as found:
        for item in found:
            if len(entries) >= MAX_ENTRIES:
                truncated = True
                break
            try:
                is_dir = item.is_dir(follow_symlinks=False)
                size = (
                    None
                    if is_dir or item.is_symlink()
                    else item.stat(follow_symlinks=False).st_size
                )
            except OSError:
                continue
            path = item.name if base == "." else f"{base}/{item.name}"
            entries.append(FileEntry(name=item.name, path=path, is_dir=is_dir, size=size))
    entries.sort(key=lambda e: (not e.is_dir, e.name))
    return FileListing(path=base, entries=entries, truncated=truncated)


UPLOAD = (
    "Upload a workspace file (raw body, or multipart/form-data with a `file` part); "
    "parent directories are created"
)


@doc(summary=UPLOAD, query=FileQuery, response=FileWritten, errors=(400, 403, 404, 409, 413))
async def upload_file(request: Request) -> Response:
    root, path, size = await _upload(request)
    return reply(FileWritten(path=relative(root, path), size=size))


@doc(
    summary=UPLOAD + " (the OpenHands answer)",
    query=FileQuery,
    response=FileUploaded,
    errors=(400, 403, 404, 409, 413),
)
async def upload(request: Request) -> Response:
    root, path, size = await _upload(request)
    return reply(FileUploaded(path=str(path), file_size=size))


async def _upload(request: Request) -> tuple[Path, Path, int]:
    where = scope(request)
    query = read_query(request, FileQuery)
    limit = _max_bytes(request)
    multipart = request.headers.get("content-type", "").startswith("multipart/form-data")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit + (MULTIPART_OVERHEAD if multipart else 0):
        raise PayloadTooLarge(f"the upload is over the limit of {limit} bytes")
    root = where.root_for(query.path)
    where.resolve(query.path)  # refuse before reading a byte of the body
    if multipart:
        upload = await _multipart_file(request, limit)
        try:
            path, size = await write_file(root, query.path, _read(upload), limit)
        finally:
            await upload.close()
    else:
        path, size = await write_file(root, query.path, request.stream(), limit)
    return root, path, size


async def _multipart_file(request: Request, limit: int) -> UploadFile:
    parser = MultiPartParser(
        request.headers,
        _capped(request.stream(), limit + MULTIPART_OVERHEAD),
        max_files=1,
        max_fields=20,
    )
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


@doc(
    summary="Changes against HEAD ([{path, status}], untracked included) of the "
    "repositories at or below `path` (default: the working directory), or of the one "
    "holding it, under it; paths relative to it; without a repository an empty list "
    "and an X-Detail header",
    query=ChangesQuery,
    response=list[GitChange],
    errors=(400, 403, 404, 409),
)
async def git_changes(request: Request) -> Response:
    where = scope(request)
    query = read_query(request, ChangesQuery)
    directory = await where.directory(query.path, "path")
    items, repos = await git.changes(
        directory, where.root_for(query.path) if query.path else where.home
    )
    return JSONResponse(
        [i.model_dump(mode="json") for i in items],
        headers={} if repos else {"X-Detail": NO_REPOSITORY},
    )


@doc(
    summary="One file's {path, original, modified}; without path the whole unified diff "
    "(text/plain)",
    query=DiffQuery,
    response=GitDiff,
    media={"text/plain": {"type": "string"}},
    errors=(400, 403, 404, 409, 413),
)
async def git_diff(request: Request) -> Response:
    where = scope(request)
    query = read_query(request, DiffQuery)
    if query.path is not None:
        return reply(
            await git.file_diff(where.root_for(query.path), query.path, _max_bytes(request))
        )
    repos = await asyncio.to_thread(git.find_repositories, where.home)
    if not repos:
        return Response("", media_type="text/plain", headers={"X-Detail": NO_REPOSITORY})
    return StreamingResponse(
        git.unified_diff(repos, _max_bytes(request)), media_type="text/plain; charset=utf-8"
    )


# -- commands --------------------------------------------------------------------------------


@doc(
    summary="Run a shell command in the workspace (set-up work), secrets in its environment "
    "and masked in its output",
    body=RunCommand,
    response=CommandResult,
    errors=(400, 403, 404, 409),
)
async def run_command(request: Request) -> Response:
    where = scope(request)
    body = await read_body(request, RunCommand)
    done = await services(request).commands.run(
        where, body.command, body.cwd, body.timeout, env=body.env, git=git_author(request)
    )
    assert done.exit_code is not None  # a command run to its end has one
    return reply(
        CommandResult(
            exit_code=done.exit_code,
            stdout=done.stdout or "",
            stderr=done.stderr or "",
            timed_out=done.timed_out,
        )
    )
