"""The LLM's HTTP transport: httpx over httpcore, acknowledging every answer at once.

A model server that writes its response headers and body in two sends with Nagle's algorithm
on (Python's http.server does; so do many small OpenAI-compatible servers) holds the body
until the headers are acknowledged. Linux delays that ACK by up to 40 ms on a connection in
its request-response rhythm, which is every kept-alive LLM connection: 40 ms lost per step,
most of a step. So after each write of a request this transport sets TCP_QUICKACK on the
socket (the kernel acknowledges what arrives next at once; the option does not stick, hence
after every write). Nothing changes on the wire but the ACK timing.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from agent_server import tls

_QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only; elsewhere a no-op


class _Stream(httpcore.AsyncNetworkStream):
    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, timeout)
        sock = self._stream.get_extra_info("socket")
        if _QUICKACK is not None and sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
            except OSError:  # not TCP (a Unix socket): nothing to hurry
                pass

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _Stream(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _Stream(
            await self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        return _Stream(await self._backend.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class QuickAckTransport(httpx.AsyncHTTPTransport):
    """httpx's transport (pooled, kept alive, TLS verified as usual), on the backend above."""

    def __init__(self) -> None:
        super().__init__(
            verify=tls.client_context(),
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        )
        # httpx builds its pool without a way to pass a network backend: the same pool,
        # built again with one.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=tls.client_context(),
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            network_backend=_Backend(),
        )


_clients: dict[int, Any] = {}


def client(litellm: Any) -> Any:
    """litellm's async HTTP handler on QuickAckTransport, one per event loop (an httpx client
    belongs to the loop it first ran in)."""
    loop = id(asyncio.get_running_loop())
    found = _clients.get(loop)
    if found is None:
        from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler

        timeout = httpx.Timeout(600.0, connect=10.0)
        found = _clients[loop] = AsyncHTTPHandler(timeout=timeout, transport=QuickAckTransport())
        del litellm  # the module is loaded by the caller; only its handler class is needed
    return found


async def close_clients() -> None:
    """Every loop's client closed and forgotten: a loop that ends (the template's warm-up)
    leaves none for a later loop that is given its id."""
    found = list(_clients.values())
    _clients.clear()
    for each in found:
        await each.close()
