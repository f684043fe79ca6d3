"""Session-key checks (SPEC 5): `X-Session-API-Key`, compared in constant time.

The application's `Authorization: Bearer` key is not a credential here; a request that sends
one gets a 401 whose detail names the header that is.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

HEADER = "X-Session-API-Key"
_HEADER_BYTES = HEADER.lower().encode()


class KeyRing:
    """The accepted keys (several during a rotation)."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = [k.encode() for k in keys]
        if not self._keys:
            raise ValueError("at least one session key is needed")

    def accepts(self, candidate: str | bytes | None) -> bool:
        if candidate is None:
            return False
        given = candidate.encode() if isinstance(candidate, str) else candidate
        ok = False
        for key in self._keys:  # every key is compared: the time does not say which matched
            ok |= hmac.compare_digest(key, given)
        return ok


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


class SessionAuth:
    """ASGI middleware guarding every HTTP route under /api (websockets check on their own)."""

    def __init__(self, app: ASGIApp, keys: KeyRing, prefixes: tuple[str, ...] = ("/api",)) -> None:
        self.app = app
        self.keys = keys
        self.prefixes = prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefixes):
            await self.app(scope, receive, send)
            return
        if self.keys.accepts(_header(scope, _HEADER_BYTES)):
            await self.app(scope, receive, send)
            return
        if _header(scope, b"authorization") is not None and _header(scope, _HEADER_BYTES) is None:
            detail = (
                f"Authorization: Bearer is not accepted by the agent server; "
                f"send the sandbox's session key in the {HEADER} header"
            )
        elif _header(scope, _HEADER_BYTES) is None:
            detail = f"Missing {HEADER} header"
        else:
            detail = f"Invalid {HEADER}"
        body = json.dumps({"detail": detail}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", HEADER.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
