"""A Starlette app served by uvicorn in a thread on a loopback port (test peers; containers'
peers listen on the Docker bridge's address instead)."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from starlette.applications import Starlette


class ThreadedServer:
    def __init__(
        self,
        app: Starlette,
        port: int,
        name: str,
        lifespan: str = "off",
        host: str = "127.0.0.1",
        sock: socket.socket | None = None,
    ) -> None:
        """`sock`: a listening socket made elsewhere (in the test internet's namespace)."""
        self.name = name
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            lifespan=lifespan,
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        sockets = None if sock is None else [sock]
        self._thread = threading.Thread(
            target=lambda: self._server.run(sockets=sockets), daemon=True, name=name
        )

    def start(self, timeout: float = 10) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"{self.name} did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
