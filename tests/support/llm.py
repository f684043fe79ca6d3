"""A scripted OpenAI-compatible LLM server on a loopback port: the tests' only fake.

litellm reaches it through `base_url`, so its whole request path runs. Each reply is taken
from a script (per key, so concurrent conversations can have their own), or made by a
responder function; every request is recorded.

    llm = ScriptedLLM().start()
    llm.script("a", call("terminal", command="echo hi"), call("finish", message="done"))
    agent = {"llm": {"model": "openai/test", "base_url": llm.base_url("a"), "api_key": "sk-test"}}
"""

from __future__ import annotations

import asyncio
import http.server
import itertools
import json
import socket
import threading
import time
import zlib
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.threaded import ThreadedServer


@dataclass
class Reply:
    """One scripted answer."""

    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    reasoning: str | None = None
    delay: float = 0.0
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    usage: dict[str, int] | None = None
    #: False: a chat completion without usage (neither the answer's `usage` nor, streamed, the
    #: last chunk that carries it), as servers that do not count tokens answer.
    report_usage: bool = True
    #: (thinking, signature) blocks: sent by the Anthropic-shaped endpoint only.
    thinking: list[tuple[str, str]] = field(default_factory=list)
    #: Streamed answers (`stream: true`) stop once `hold_after` characters of the text are sent,
    #: until `hold` is set: a test sees the text part-way, deterministically.
    hold: threading.Event | None = None
    hold_after: int = 0
    #: (prompt ids, response ids) sent instead of the tokenizer's when the request asks for
    #: token ids (`return_token_ids`, as vLLM takes it).
    token_ids: tuple[list[int], list[int]] | None = None


def text(content: str, **kw: Any) -> Reply:
    return Reply(text=content, **kw)


def call(name: str, _text: str = "", **arguments: Any) -> Reply:
    """One tool call; arguments as keywords (a str `_args` is sent raw)."""
    raw = arguments.pop("_args", None)
    return Reply(text=_text, tool_calls=[(name, raw if raw is not None else arguments)])


def calls(*pairs: tuple[str, dict[str, Any] | str], text: str = "") -> Reply:
    return Reply(text=text, tool_calls=list(pairs))


def error(status: int, message: str = "scripted error", retry_after: float | None = None) -> Reply:
    headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
    return Reply(status=status, error=message, headers=headers)


def token_ids(text: str) -> list[int]:
    """The scripted server's tokenizer: one id per whitespace-separated word (a test can
    compute what the server sent from what it was asked)."""
    return [zlib.crc32(word.encode()) % 100_000 for word in text.split()]


def prompt_text(body: dict[str, Any]) -> str:
    """The text of a request's messages, in order (what `token_ids` tokenizes)."""
    parts = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return "\n".join(parts)


def response_text(reply: Reply) -> str:
    """What the scripted tokenizer reads of an answer: its text, then each call's name and
    JSON arguments."""
    calls = " ".join(
        f"{name} {args if isinstance(args, str) else json.dumps(args)}"
        for name, args in reply.tool_calls
    )
    return f"{reply.text} {calls}".strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ScriptedLLM:
    def __init__(self, host: str = "127.0.0.1") -> None:
        #: Where it listens: loopback, or the Docker bridge's address for sandboxes in containers.
        self.host = host
        self.scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self.requests: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.responder: Callable[[str, dict[str, Any]], Reply] | None = None
        #: Consulted before the script: a Reply answers the request without using the script
        #: (e.g. a reference server's side requests such as title generation).
        self.interceptor: Callable[[str, dict[str, Any]], Reply | None] | None = None
        #: Per key: (monotonic time a request arrived, time its answer was ready) pairs.
        self.timings: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.port = free_port()
        self._server: ThreadedServer | None = None
        self._raw: http.server.ThreadingHTTPServer | None = None
        #: Per key: wall-clock times the raw server finished writing each answer.
        self.answered: dict[str, list[float]] = defaultdict(list)
        #: Reasoning items given out by the Responses API endpoint, by id, as given.
        self.reasoning_items: dict[str, dict[str, Any]] = {}
        #: Per key: the headers (lowercase names) and query of each request, as it arrived.
        self.received: dict[str, list[tuple[dict[str, str], dict[str, str]]]] = defaultdict(list)

    # -- scripting -----------------------------------------------------------------------

    def script(self, key: str, *replies: Reply) -> None:
        with self._lock:
            self.scripts[key].extend(replies)

    def base_url(self, key: str = "default", host: str | None = None) -> str:
        """`host`: the name its clients know it by (a container: host.docker.internal)."""
        return f"http://{host or self.host}:{self.port}/k/{key}/v1"

    def requests_for(self, key: str = "default") -> list[dict[str, Any]]:
        with self._lock:
            return list(self.requests[key])

    def _next(self, key: str, body: dict[str, Any]) -> Reply:
        if self.interceptor is not None:
            intercepted = self.interceptor(key, body)
            if intercepted is not None:
                return intercepted
        with self._lock:
            self.requests[key].append(body)
            if self.scripts[key]:
                return self.scripts[key].popleft()
        if self.responder is not None:
            return self.responder(key, body)
        return error(500, f"the script for {key!r} is exhausted")

    # -- serving -------------------------------------------------------------------------

    def _receive(self, key: str, request: Request) -> None:
        with self._lock:
            self.received[key].append((dict(request.headers), dict(request.query_params)))

    def headers_for(self, key: str = "default") -> list[dict[str, str]]:
        """The headers of each request for `key`, in order."""
        with self._lock:
            return [headers for headers, _ in self.received[key]]

    async def _completions(self, request: Request) -> Response:
        arrived = time.monotonic()
        key = request.path_params["key"]
        self._receive(key, request)
        body = await request.json()
        reply = self._next(key, body)
        response = await self._answer(key, body, reply)
        self.timings[key].append((arrived, time.monotonic()))
        self.answered[key].append(time.time())
        return response

    async def _answer(self, key: str, body: dict[str, Any], reply: Reply) -> Response:
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.status != 200:
            return JSONResponse(
                self._error_body(reply), status_code=reply.status, headers=reply.headers
            )
        if body.get("stream"):
            rid, model, tool_calls, usage = self._parts(body, reply)
            return StreamingResponse(
                self._chunks(rid, model, reply, tool_calls, usage, self._token_ids(body, reply)),
                media_type="text/event-stream",
            )
        return JSONResponse(self._completion(body, reply))

    @staticmethod
    def _error_body(reply: Reply) -> dict[str, Any]:
        return {"error": {"message": reply.error, "type": "scripted", "code": reply.status}}

    def _parts(
        self, body: dict[str, Any], reply: Reply
    ) -> tuple[str, str, list[dict[str, Any]], dict[str, int]]:
        rid = f"chatcmpl-{next(self._ids)}"
        model = body.get("model", "test")
        prompt_tokens = len(json.dumps(body.get("messages", []))) // 4
        usage = reply.usage or {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 10 + len(reply.text) // 4,
            "total_tokens": prompt_tokens + 10 + len(reply.text) // 4,
        }
        tool_calls = [
            {
                "id": f"call_{rid}_{i}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for i, (name, args) in enumerate(reply.tool_calls)
        ]
        return rid, model, tool_calls, usage

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        rid, model, tool_calls, usage = self._parts(body, reply)
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if tool_calls:
            message["tool_calls"] = tool_calls
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": "tool_calls" if tool_calls else "stop",
        }
        answer: dict[str, Any] = {
            "id": rid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
        }
        if reply.report_usage:
            answer["usage"] = usage
        ids = self._token_ids(body, reply)
        if ids is not None:
            answer["prompt_token_ids"], choice["token_ids"] = ids
        return answer

    @staticmethod
    def _token_ids(body: dict[str, Any], reply: Reply) -> tuple[list[int], list[int]] | None:
        """(prompt ids, response ids) when the request asks for them (`return_token_ids`, an
        extension of vLLM's OpenAI-compatible server), None otherwise."""
        if not body.get("return_token_ids"):
            return None
        return reply.token_ids or (token_ids(prompt_text(body)), token_ids(response_text(reply)))

    async def _chunks(
        self,
        rid: str,
        model: str,
        reply: Reply,
        tool_calls: list[dict[str, Any]],
        usage: dict[str, int],
        ids: tuple[list[int], list[int]] | None = None,
    ):  # type: ignore[no-untyped-def]
        def chunk(
            delta: dict[str, Any],
            finish: str | None = None,
            token_ids: list[int] | None = None,
            **extra: Any,
        ) -> str:
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
            if token_ids is not None:
                choice["token_ids"] = token_ids
            data = {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [choice],
                **extra,
            }
            return f"data: {json.dumps(data)}\n\n"

        # vLLM sends the prompt's ids with the first chunk and each piece's ids with it; here
        # the whole answer's ids come with the last piece.
        yield chunk(
            {"role": "assistant", "content": ""},
            **({"token_ids": [], "prompt_token_ids": ids[0]} if ids else {}),
        )
        if reply.reasoning:
            yield chunk({"reasoning_content": reply.reasoning})
        for i in range(0, len(reply.text), 8):
            yield chunk({"content": reply.text[i : i + 8]})
            if reply.hold is not None and i + 8 >= reply.hold_after:
                while not reply.hold.is_set():
                    await asyncio.sleep(0.01)
        for index, tc in enumerate(tool_calls):
            args = tc["function"]["arguments"]
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": tc["id"],
                            "type": "function",
                            "function": {"name": tc["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
            for i in range(0, len(args), 10):
                yield chunk(
                    {"tool_calls": [{"index": index, "function": {"arguments": args[i : i + 10]}}]}
                )
        yield chunk({}, "tool_calls" if tool_calls else "stop", ids[1] if ids else None)
        if not reply.report_usage:
            yield "data: [DONE]\n\n"
            return
        final = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [],
            "usage": usage,
        }
        yield f"data: {json.dumps(final)}\n\n"
        yield "data: [DONE]\n\n"

    async def _take(self, request: Request) -> tuple[dict[str, Any], Reply]:
        """The request's body and its scripted reply, once the reply's delay has passed."""
        key = request.path_params["key"]
        self._receive(key, request)
        body = await request.json()
        reply = self._next(key, body)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        return body, reply

    async def _messages(self, request: Request) -> Response:
        """Anthropic's messages API (litellm's `anthropic/` provider with base_url)."""
        body, reply = await self._take(request)
        if reply.status != 200:
            return JSONResponse(
                {"type": "error", "error": {"type": "api_error", "message": reply.error}},
                status_code=reply.status,
                headers=reply.headers,
            )
        rid = f"msg_{next(self._ids)}"
        content: list[dict[str, Any]] = [
            {"type": "thinking", "thinking": t, "signature": sig} for t, sig in reply.thinking
        ]
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for i, (name, args) in enumerate(reply.tool_calls):
            content.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{rid}_{i}",
                    "name": name,
                    "input": json.loads(args) if isinstance(args, str) else args,
                }
            )
        return JSONResponse(
            {
                "id": rid,
                "type": "message",
                "role": "assistant",
                "model": body.get("model", "claude"),
                "content": content,
                "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 100,
                    "output_tokens": 20,
                    "cache_read_input_tokens": 0,
                    "cache_creation_input_tokens": 0,
                },
            }
        )

    async def _responses(self, request: Request) -> Response:
        """OpenAI's Responses API (litellm's `aresponses`), stateless as the agent calls it:
        a reasoning item it gave out must come back unchanged (as OpenAI checks its
        encrypted content), or the request is refused with 400."""
        body, reply = await self._take(request)
        if reply.status != 200:
            return JSONResponse(
                self._error_body(reply), status_code=reply.status, headers=reply.headers
            )
        for item in body.get("input") or []:
            if isinstance(item, dict) and item.get("type") == "reasoning":
                given = self.reasoning_items.get(str(item.get("id")))
                if given is None or {k: item.get(k) for k in given} != given:
                    return JSONResponse(
                        {
                            "error": {
                                "message": (
                                    f"reasoning item {item.get('id')!r} is not as it was given"
                                ),
                                "type": "invalid_request_error",
                                "code": 400,
                            }
                        },
                        status_code=400,
                    )
        response = self._response(body, reply)
        if body.get("stream"):
            return StreamingResponse(
                self._response_events(response, reply), media_type="text/event-stream"
            )
        return JSONResponse(response)

    def _response(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        n = next(self._ids)
        output: list[dict[str, Any]] = []
        if reply.reasoning is not None:
            item = {
                "id": f"rs_{n}",
                "summary": [{"type": "summary_text", "text": reply.reasoning}],
                "encrypted_content": (
                    f"gAAAA-sealed-{n}-{zlib.crc32(reply.reasoning.encode())}"
                    if "reasoning.encrypted_content" in (body.get("include") or [])
                    else None
                ),
            }
            with self._lock:
                self.reasoning_items[item["id"]] = item
            output.append({"type": "reasoning", **item})
        if reply.text:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{n}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        for i, (name, args) in enumerate(reply.tool_calls):
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{n}_{i}",
                    "call_id": f"call_{n}_{i}",
                    "name": name,
                    "status": "completed",
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                }
            )
        prompt = len(json.dumps(body.get("input", []))) // 4
        return {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": body.get("model", "test"),
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "metadata": {},
            "temperature": None,
            "top_p": None,
            "store": False,
            "usage": reply.usage
            or {
                "input_tokens": prompt,
                "output_tokens": 10 + len(reply.text) // 4,
                "total_tokens": prompt + 10 + len(reply.text) // 4,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 7 if reply.reasoning else 0},
            },
        }

    async def _response_events(self, response: dict[str, Any], reply: Reply):  # type: ignore[no-untyped-def]
        def event(kind: str, **fields: Any) -> str:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n"

        created = {**response, "status": "in_progress", "output": []}
        yield event("response.created", response=created, sequence_number=0)
        n = 1
        if reply.reasoning:
            yield event(
                "response.reasoning_summary_text.delta",
                item_id=f"rs_{response['id']}",
                output_index=0,
                summary_index=0,
                delta=reply.reasoning,
                sequence_number=n,
            )
            n += 1
        for i in range(0, len(reply.text), 8):
            yield event(
                "response.output_text.delta",
                item_id="msg",
                output_index=0,
                content_index=0,
                delta=reply.text[i : i + 8],
                sequence_number=n,
                logprobs=[],
            )
            n += 1
        yield event("response.completed", response=response, sequence_number=n)

    def anthropic_base_url(self, key: str) -> str:
        return f"http://{self.host}:{self.port}/k/{key}"

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/k/{key}/v1/messages", self._messages, methods=["POST"]),
                Route("/k/{key}/v1/chat/completions", self._completions, methods=["POST"]),
                Route("/k/{key}/chat/completions", self._completions, methods=["POST"]),
                Route("/k/{key}/v1/responses", self._responses, methods=["POST"]),
            ]
        )

    def start(self) -> ScriptedLLM:
        self._server = ThreadedServer(self.app(), self.port, "scripted LLM server", host=self.host)
        self._server.start()
        return self

    def start_on_internet(self) -> ScriptedLLM:
        """Serve on the test internet (`llm.test`'s address), as an LLM provider is: where
        sandboxes behind the boundary reach it with an `open` policy, and the control plane's
        gateway from this host."""
        from tests.support.internet import Internet

        internet = Internet.shared()
        self.host = internet.names["llm.test"][0]
        sock = internet.socket(self.port, self.host)
        self._server = ThreadedServer(
            self.app(), self.port, "scripted LLM server", host=self.host, sock=sock
        )
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        if self._raw is not None:
            self._raw.shutdown()
            self._raw.server_close()

    # -- the way Python's own HTTP server answers -------------------------------------------

    def start_raw(self) -> ScriptedLLM:
        """Serve chat completions (not streamed) with http.server instead: keep-alive, the
        status line and headers written in one send and the body in another, and Nagle's
        algorithm left on, as many small OpenAI-compatible servers do. A client that delays
        its ACK of the headers then waits for its timer (about 40 ms on Linux) for the body."""
        self._raw = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), self._raw_handler())
        self._raw.daemon_threads = True
        threading.Thread(
            target=self._raw.serve_forever, name="scripted LLM (raw)", daemon=True
        ).start()
        return self

    def _raw_handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        llm = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                arrived = time.monotonic()
                parts = self.path.strip("/").split("/")
                key = parts[1] if len(parts) > 1 and parts[0] == "k" else "default"
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                reply = llm._next(key, body)
                if reply.delay:
                    time.sleep(reply.delay)
                ok = reply.status == 200
                data = json.dumps(
                    llm._completion(body, reply) if ok else llm._error_body(reply)
                ).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()  # one send: the status line and headers
                self.wfile.write(data)  # another: the body
                llm.timings[key].append((arrived, time.monotonic()))
                llm.answered[key].append(time.time())

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
