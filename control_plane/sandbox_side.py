"""The control plane as its sandboxes reach it: a few routes, on the segment's gateway only.

A sandbox behind the network boundary reaches one address of this host, the gateway of its
segment, and there one port: this control plane's. What it may ask there is what a sandbox
needs of its control plane and nothing else: the webhook, the LLM gateway, its own secrets
and network state, and whether the server is alive. The console, the API keys' routes and the
rest answer 404 to a request that arrived on a sandbox-side address, whoever sends it.

Where the main listener does not cover the gateway (it listens on loopback, as by default),
a second listener is bound there (`Listener`): the same app, its services handed over, no
second lifespan. Its socket may be shared (SO_REUSEPORT) by every control plane of the
deployment on this host, so a sandbox's webhook reaches whichever is up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
from typing import Any

import uvicorn
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from web import keepalive

logger = logging.getLogger(__name__)
#: Seconds between looks at whether the provider knows its gateway yet.
WAIT_INTERVAL = 0.5
#: Paths a sandbox may ask for on its side.
ROUTES = re.compile(
    r"^/(?:alive|health"
    r"|api/v1/webhooks/(?:events/[^/]+|conversations)"
    r"|api/v1/llm/.*"
    r"|api/v1/sandboxes/[^/]+/(?:settings/secrets(?:/[^/]+)?|network))$"
)


class SandboxSide:
    """Middleware: a request that arrived on the sandbox-side address (the provider's
    `sandbox_side`, once its boundary is up) gets the sandbox routes alone."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and _sandbox_side(scope):
            if not ROUTES.match(scope.get("path", "")):
                if scope["type"] == "http":
                    await JSONResponse({"detail": "Not Found"}, status_code=404)(
                        scope, receive, send
                    )
                else:
                    await send({"type": "websocket.close", "code": 1008})
                return
        await self.app(scope, receive, send)


def _sandbox_side(scope: Scope) -> bool:
    services = (scope.get("state") or {}).get("services")
    side = getattr(getattr(services, "provider", None), "sandbox_side", None)
    server = scope.get("server")
    return side is not None and server is not None and str(server[0]) == side


def covers(host: str, address: str) -> bool:
    """Whether a listener on `host` already receives connections to `address`."""
    return host in ("0.0.0.0", "", "::") or host == str(address)


class Side:
    """The sandbox-side listener, bound once the provider knows its gateway (at once for
    process sandboxes; once Docker has made its network for containers), where the main one
    does not cover it."""

    def __init__(
        self,
        app: ASGIApp,
        state: dict[str, Any],
        host: str,
        port: int,
        sandbox_port: int,
        log_level: str,
    ) -> None:
        """`host`, `port`: the main listener's; `sandbox_port`: the sandboxes' side's."""
        self.app, self.state, self.host, self.port = app, state, host, port
        self.sandbox_port = sandbox_port
        self.log_level = log_level
        self.listener: Listener | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._serve(), name="sandbox-side listener")

    async def _serve(self) -> None:
        provider = self.state["services"].provider
        while (side := provider.sandbox_side) is None:
            await asyncio.sleep(WAIT_INTERVAL)
        if covers(self.host, side) and self.port == self.sandbox_port:
            return
        listener = Listener(self.app, self.state, side, self.sandbox_port, self.log_level)
        try:
            await listener.start()
        except OSError as exc:
            logger.error(
                "this control plane cannot listen on %s:%s, where its sandboxes reach it: %s",
                side,
                self.sandbox_port,
                exc,
            )
            return
        self.listener = listener

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.listener is not None:
            await self.listener.close()


class Listener:
    """The app served on one more address, with the services the main lifespan made."""

    def __init__(
        self, app: ASGIApp, state: dict[str, Any], host: str, port: int, log_level: str = "warning"
    ) -> None:
        self._config = uvicorn.Config(
            app,
            host=host,
            port=port,
            lifespan="off",
            log_level=log_level,
            log_config=None,  # through the root handler, as the API's records are
            access_log=False,  # the app's own (`web.accesslog`): never a query string
            timeout_graceful_shutdown=5,
            timeout_keep_alive=keepalive.IDLE_SECONDS,  # past the sandboxes' own pools (see there)
        )
        self._server = uvicorn.Server(self._config)
        self._state = state
        self._socket: socket.socket | None = None

    async def start(self) -> None:
        self._config.load()
        lifespan = self._config.lifespan_class(self._config)
        lifespan.state.update(self._state)
        self._server.lifespan = lifespan
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((self._config.host, self._config.port))
            sock.listen(self._config.backlog)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._socket = sock
        await self._server.startup(sockets=[sock])

    async def close(self) -> None:
        if self._socket is None:
            return
        self._server.should_exit = True
        await self._server.shutdown(sockets=[self._socket])
        self._socket.close()
        self._socket = None
