"""One log line per request: method, path, status, milliseconds. Never a query string (it may
hold a key: the LLM gateway takes one there, as the providers it stands for do), the path
escaped (`web.logs.escape`), so a client cannot forge a line. Both services log their requests
so, in place of uvicorn's access log, which prints the query."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from web.logs import escape


class AccessLog:
    def __init__(
        self,
        app: ASGIApp,
        logger: str,
        on_activity: Any = None,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        """`logger`: the name lines are logged under (`<service>.access`); `on_activity`:
        called after each request (the agent server's idle clock); `redact`: the path as it
        may be logged (a capability in a path, as the control plane's app links carry, is
        a credential like any other)."""
        self.app = app
        self.logger = logging.getLogger(logger)
        self.on_activity = on_activity
        self.redact = redact

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "websocket.close":
                status = message.get("code", 1000)
            elif message["type"] == "websocket.accept":
                status = 101
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if self.on_activity is not None:
                self.on_activity()
            ms = (time.perf_counter() - started) * 1000
            method = escape(str(scope.get("method", "WS")))
            path = scope["path"] if self.redact is None else self.redact(scope["path"])
            self.logger.info("%s %s %s %.1fms", method, escape(path), status or 500, ms)
