"""The forwarding: one request to the upstream and its answer back to the sandbox, as they come.

Forwarded as sent: the method, the body (bytes, untouched), the query and the headers, less
the hop-by-hop ones (they concern one connection, not the request), `Host` (the upstream's
own), `Content-Length` (recomputed), `Accept-Encoding` (see REQUEST_DROPPED) and the
credential (`credentials.swapped` puts the user's key in). The answer comes back with its
status and headers, hop-by-hop ones again left out, and its body chunk by chunk as the
upstream sends it: a stream (server-sent events) reaches the model client event by event,
never gathered first. Bodies arrive decoded (httpx undoes gzip),
so `Content-Encoding` and `Content-Length` are left out too and the answer goes out chunked.

One `httpx.AsyncClient` serves every sandbox: connections to a provider are kept and reused,
bounded in number (`LIMITS`). A connection that takes too long, or an upstream silent for
READ_TIMEOUT between two chunks, fails the call. Redirects are not followed: a 3xx goes back
to the client as it came, so no redirect leads the control plane somewhere it was not asked to
call.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol
from urllib.parse import urlsplit

import httpx
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from control_plane.gateway.errors import Kind, Refusal

logger = logging.getLogger(__name__)

#: Headers of one connection, never forwarded either way (RFC 9110 7.6.1).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
#: `Accept-Encoding` too: the gateway decodes what it relays (to read its usage), so it asks
#: for the encodings its own httpx can undo (its default), not those the client could.
REQUEST_DROPPED = HOP_BY_HOP | {"host", "content-length", "accept-encoding"}
RESPONSE_DROPPED = HOP_BY_HOP | {"content-length", "content-encoding"}
#: A model may think for minutes before its first byte (not streamed), but not for ever.
READ_TIMEOUT = 600.0
TIMEOUT = httpx.Timeout(connect=15.0, read=READ_TIMEOUT, write=60.0, pool=30.0)
LIMITS = httpx.Limits(max_connections=256, max_keepalive_connections=64, keepalive_expiry=60.0)


def outbound(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The request's headers as forwarded (before the credential is put in)."""
    dropped = REQUEST_DROPPED | _named_in_connection(headers)
    return [(n, v) for n, v in headers if n.lower() not in dropped]


def inbound(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The answer's headers as passed back."""
    dropped = RESPONSE_DROPPED | _named_in_connection(headers)
    return [(n, v) for n, v in headers if n.lower() not in dropped]


def _named_in_connection(headers: list[tuple[str, str]]) -> set[str]:
    """Headers `Connection` names are hop-by-hop too."""
    return {
        name.strip().lower()
        for n, v in headers
        if n.lower() == "connection"
        for name in v.split(",")
    }


class Observer(Protocol):
    """Watches one answer's body pass (`control_plane.gateway.metering`)."""

    def feed(self, chunk: bytes) -> None: ...

    def end(self) -> None:
        """The body ended, broke off, or the client went away: told once."""


class Relayed(StreamingResponse):
    """A streamed answer that closes its upstream however the relay ends: when the client
    goes away before its body even began, no generator's `finally` would run."""

    def __init__(
        self, body: AsyncIterator[bytes], status_code: int, finish: Callable[[], Awaitable[None]]
    ) -> None:
        super().__init__(body, status_code=status_code)
        self._finish = finish

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._finish()


class Forwarder:
    """Sends requests upstream and streams their answers back (`send`)."""

    def __init__(self, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.client = httpx.AsyncClient(
            timeout=TIMEOUT,
            limits=LIMITS,
            follow_redirects=False,
            trust_env=False,
            transport=transport,
        )

    async def send(
        self,
        method: str,
        url: str,
        headers: list[tuple[str, str]],
        body: bytes,
        observe: Callable[[httpx.Response], Observer],
    ) -> StreamingResponse:
        """The upstream's answer as a streaming response; each chunk goes to the client, then
        to the observer `observe` makes of the answer. No answer at all (the upstream
        unreachable, or silent past the time limits) is Refusal(502)."""
        request = self.client.build_request(method, url, headers=headers, content=body)
        try:
            upstream = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            host = urlsplit(url).hostname or url
            logger.info("LLM gateway: %s could not be reached (%s)", host, type(exc).__name__)
            raise Refusal(
                Kind.UNREACHABLE, f"The LLM gateway could not reach {host}: {type(exc).__name__}."
            ) from None
        observer = observe(upstream)
        finished = False

        async def finish() -> None:
            nonlocal finished
            if not finished:
                finished = True
                observer.end()  # before any await: a cancelled relay still counts
                await upstream.aclose()

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_bytes():
                    yield chunk
                    observer.feed(chunk)
            except httpx.HTTPError as exc:  # the upstream broke off: the client sees it end
                logger.info(
                    "LLM gateway: the answer from %s broke off (%s)",
                    request.url.host,
                    type(exc).__name__,
                )
            finally:
                await finish()

        answer = Relayed(chunks(), upstream.status_code, finish)
        # Set whole, not as a mapping: a header the upstream repeats (Set-Cookie) stays so.
        answer.raw_headers = [
            (n.lower().encode("latin-1"), v.encode("latin-1"))
            for n, v in inbound(list(upstream.headers.multi_items()))
        ]
        return answer

    async def close(self) -> None:
        await self.client.aclose()
