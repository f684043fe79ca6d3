"""One log line per request: method, path, status, milliseconds. Never a query string; the
path escaped (`web.logs.escape`), so a client cannot forge a line."""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from web.logs import escape

logger = logging.getLogger("agent_server.access")


class AccessLog:
    def __init__(self, app: ASGIApp, on_activity: Any = None) -> None:
        self.app = app
        self.on_activity = on_activity

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
            logger.info("%s %s %s %.1fms", method, escape(scope["path"]), status or 500, ms)
