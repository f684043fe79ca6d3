"""Rehearsals: a server's first model calls and its first conversation, made once against
canned parts before any tenant's request, so that what they build or write is done by then.

- `warm_up`, in the sandbox template (`template.preload`) and a Docker or Swarm warm pool's
  parked server (`warm`): what litellm builds on its first calls (pydantic schemas it completes
  late, its lower-cased price map, provider modules it imports, the lines of a cost failure's
  traceback, its providers' configurations) would otherwise be built again in every sandbox's
  own memory: ~8 MiB each, measured.
- `first_conversation`: a conversation created through the app of a throwaway configuration
  (its state in a temporary directory, removed after), whose message does not run. In the
  template, what a first creation builds (its first validations, compiled patterns, routes)
  is then shared by every fork.
- `rehearse`, the first conversation again in a server the template forked for a warm pool,
  while it waits for its keys: a forked server's first writes to the template's pages
  (reference counts, the collector's headers, allocations in the template's pools) each copy a
  page (a fault: ~1,500 for a first creation, measured), and those are then made before its
  start is asked for, not while the start waits. It runs in the sandbox already, as its user,
  before any key: nothing of a tenant, nor of this host, is involved.

Each uses made-up keys and no model but a canned one on loopback (the conversation's is never
called). A failure is said in a line and changes nothing else: a rehearsal only saves time and
memory.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import SecretStr

from agent_server.agent import litellm_setup, transport
from agent_server.agent.model import LiteLLMModel
from agent_server.agent.spec import LLMConfig

#: The warm-up's models: one litellm's map knows (its cost is computed) and one it does not
#: (litellm looks for it among its providers, importing some, and formats a traceback for
#: its cost: the source lines that reads are cached here once).
WARM_MODELS = ("openai/gpt-4o-mini", "openai/agent-server-template")
#: Calls per model: the canned model answers a tool call, then text.
WARM_CALLS = 2
WARM_TIMEOUT = 30.0
#: What the warm-up keeps of this process's environment: litellm reads variables as it calls
#: (a provider's key, base URL, region...), and none of this host's may end up in what it
#: caches for the servers forked later.
WARM_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")


def warm_up() -> int:
    """A server's first model calls, made here once; the number answered (0: skipped).

    What litellm builds on its first calls (pydantic schemas it completes late, its
    lower-cased price map, provider modules it imports, the lines of a cost failure's
    traceback, its providers' configurations) would otherwise be built again in every
    sandbox's own memory: ~8 MiB each, measured. The model is a canned one on this host's
    loopback, the key a made-up one, the environment `WARM_ENV` only, the loop (asyncio's
    own) one of the warm-up's, closed before any fork: nothing of a tenant, nor of this
    host, is involved. A failure is said in a line and changes nothing else: the warm-up
    only saves memory."""
    canned = _CannedModel()
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(
        {k: v for k, v in saved.items() if k in WARM_ENV or k in litellm_setup.ENVIRONMENT}
    )
    try:
        with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
            runner.run(asyncio.wait_for(_warm_calls(canned), WARM_TIMEOUT))
    except Exception as exc:  # any failure leaves the template as it was, only larger
        print(f"template: warm-up skipped: {exc!r}", file=sys.stderr, flush=True)
        return 0
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return canned.calls


async def _warm_calls(canned: _CannedModel) -> None:
    server = await asyncio.start_server(canned.answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    model = LiteLLMModel()
    try:
        for name in WARM_MODELS:
            config = LLMConfig(
                model=name,
                base_url=f"http://127.0.0.1:{port}/v1",
                api_key=SecretStr("sk-template-warm-up"),
                num_retries=0,
                timeout=10,
            )
            await model.supports_vision(config)
            await model.context_window(config)
            for _ in range(WARM_CALLS):
                await model.complete(config, _WARM_MESSAGES, _WARM_TOOLS)
    finally:
        # Its HTTP client belongs to the warm-up's loop (`transport.client` keeps one per
        # loop, by the loop's id): closed and forgotten, no server's loop may find it.
        await transport.close_clients()
        server.close()
        await server.wait_closed()
        await canned.closed()


_WARM_TOOLS: list[dict[str, object]] = [
    {
        "type": "function",
        "function": {
            "name": "think",
            "description": "Think.",
            "parameters": {"type": "object", "properties": {"thought": {"type": "string"}}},
        },
    }
]
_WARM_MESSAGES: list[dict[str, object]] = [
    {"role": "system", "content": "You are a warm-up."},
    {"role": "user", "content": [{"type": "text", "text": "Think."}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call-1",
                "type": "function",
                "function": {"name": "think", "arguments": '{"thought": "a"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call-1", "name": "think", "content": "ok"},
]


class _CannedModel:
    """An OpenAI-compatible chat completions endpoint that answers a tool call and text in
    turn (both shapes of answer parsed once)."""

    def __init__(self) -> None:
        self.calls = 0
        self.connections: set[asyncio.Task[None]] = set()

    async def answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                body = self._body()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # the client closed the connection
        except asyncio.CancelledError:
            pass  # ended by `closed`: a task of this server's own, awaited by no one else
        finally:
            writer.close()
            self.connections.discard(task)

    def _body(self) -> bytes:
        self.calls += 1
        tool = self.calls % 2 == 1
        call = {
            "id": f"call-{self.calls}",
            "type": "function",
            "function": {"name": "think", "arguments": '{"thought": "b"}'},
        }
        message = (
            {"role": "assistant", "content": None, "tool_calls": [call]}
            if tool
            else {"role": "assistant", "content": "Done."}
        )
        return json.dumps(
            {
                "id": f"chatcmpl-warm-up-{self.calls}",
                "object": "chat.completion",
                "created": 0,
                "model": "warm-up",
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if tool else "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        ).encode()

    async def closed(self) -> None:
        """Every connection's handler ended: the client closed them all (a handler sees it on
        its next turn), or, after a second, they are ended here."""
        if self.connections:
            await asyncio.wait(list(self.connections), timeout=1.0)
        for task in list(self.connections):
            task.cancel()
        await asyncio.gather(*self.connections, return_exceptions=True)


#: The rehearsal's conversation: an agent with the SDK's default tools whose model is never
#: called (its message does not run), a secret to mask, a message to store.
_FIRST_TOOLS = ("terminal", "file_editor", "task_tracker")
#: Seconds the first conversation may take (its own server, no network).
FIRST_TIMEOUT = 30.0


def first_conversation() -> bool:
    """A conversation created through a throwaway server's app, in-process; whether it was."""
    from agent_server.app import build_app  # the top of the server: imported when rehearsed
    from agent_server.config import from_env

    try:
        with tempfile.TemporaryDirectory(prefix="agent-server-rehearsal-") as tmp:
            key = uuid.uuid4().hex
            config = from_env(
                {"SESSION_API_KEY": key}, state_dir=f"{tmp}/state", working_dir=f"{tmp}/work"
            )
            app = build_app(config)
            with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
                return runner.run(
                    asyncio.wait_for(_created(app, key, f"{tmp}/work"), FIRST_TIMEOUT)
                )
    except Exception as exc:  # the server starts all the same, with nothing of this kept
        print(f"rehearsal: first conversation skipped: {exc!r}", file=sys.stderr, flush=True)
        return False


async def _created(app: Any, key: str, work: str) -> bool:
    """POST /api/conversations through the app's own ASGI interface, in its lifespan."""
    body = {
        "conversation_id": str(uuid.uuid4()),
        "agent": {
            "llm": {
                "model": "openai/agent-server-rehearsal",
                "base_url": "http://127.0.0.1:9/v1",
                "api_key": "sk-rehearsal",
            },
            "tools": [{"name": name} for name in _FIRST_TOOLS],
        },
        "workspace": {"working_dir": f"{work}/first"},
        "secrets": {"REHEARSAL_TOKEN": "rehearsal-secret-value"},
        "title": "rehearsal",
        "initial_message": {"content": [{"type": "text", "text": "Hello."}], "run": False},
    }
    async with app.router.lifespan_context(app) as state:

        async def with_state(scope: Any, receive: Any, send: Any) -> None:
            scope["state"] = dict(state)  # as a server's lifespan gives each request
            await app(scope, receive, send)

        transport_ = httpx.ASGITransport(app=with_state)
        async with httpx.AsyncClient(
            transport=transport_, base_url="http://rehearsal", headers={"X-Session-API-Key": key}
        ) as client:
            answer = await client.post("/api/conversations", json=body)
    if answer.status_code != 201:
        raise RuntimeError(f"the creation answered {answer.status_code}: {answer.text[:300]}")
    return True


def rehearse(waiting: Callable[[], bool]) -> None:
    """The first conversation again, in a forked server while it is `waiting` for its keys:
    what a start's app and creation write of the template's pages is then its own before the
    start comes. (The model calls are not rehearsed again: they made each server hold about
    1.4 MiB more, measured, and its first model call came no sooner.)"""
    if waiting() and first_conversation():
        print("rehearsal: first conversation created", file=sys.stderr, flush=True)
