"""Http: the bridge's one HTTP client of a service (an agent server or a control plane).

A base URL, the credential header, a timeout on every call and a swappable transport; an
answer that is not a success becomes a BridgeError whose words can be shown to the editor
(errors.py): the key never, the URL only as scheme, host and port.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from bridge.errors import BridgeError, Invalid, NotFound, Refused, ServiceFailed, Unreachable

#: Characters of a refusal's detail passed on to the editor.
MAX_DETAIL = 500


def describe(url: str) -> str:
    """`scheme://host:port` of a URL: what an error may say of where the service is."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def _detail(response: httpx.Response) -> str:
    """The service's own words: `detail` as a string, or SPEC 7's validation errors."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:MAX_DETAIL]
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, str):
        return detail[:MAX_DETAIL]
    if isinstance(detail, list):
        parts = []
        for item in detail[:5]:
            if isinstance(item, dict):
                where = ".".join(str(p) for p in item.get("loc", []))
                parts.append(f"{where}: {item.get('msg', '')}")
        return "; ".join(parts)[:MAX_DETAIL]
    return ""


class Http:
    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        name: str,
        timeout: float,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        #: How errors name the service: "the agent server at http://127.0.0.1:8000".
        self.where = f"{name} at {describe(base_url)}"
        self.timeout = timeout
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=dict(headers),
            transport=transport,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
        )

    def unreachable(self, exc: Exception) -> Unreachable:
        if isinstance(exc, httpx.TimeoutException):
            return Unreachable(f"{self.where} did not answer within {self.timeout:g} s")
        if isinstance(exc, httpx.ConnectError):
            return Unreachable(f"cannot reach {self.where} (connection refused or no route)")
        return Unreachable(f"cannot reach {self.where} ({type(exc).__name__})")

    def failure(self, response: httpx.Response) -> BridgeError:
        return self.failure_status(response.status_code, _detail(response))

    def failure_status(self, status: int, detail: str = "") -> BridgeError:
        """The error of an answer with this status (and the service's words, if any)."""
        said = f": {detail}" if detail else ""
        if status in (401, 403):
            return Refused(
                f"{self.where} refused the key ({status}); check the key the bridge was given",
                status,
            )
        if status == 404:
            return NotFound(detail or f"not found on {self.where}", status)
        if 400 <= status < 500:
            return Invalid(f"{self.where} refused the request ({status}){said}", status)
        return ServiceFailed(f"{self.where} failed ({status}){said}", status)

    async def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str | int] | None = None,
    ) -> Any:
        """The answer's JSON; a BridgeError for anything but a 2xx."""
        try:
            response = await self._client.request(method, path, json=json, params=params)
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from None
        if not response.is_success:
            raise self.failure(response)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise ServiceFailed(f"{self.where} answered {path} with something not JSON") from None

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, *, headers: Mapping[str, str] | None = None, read_timeout: float
    ) -> AsyncIterator[httpx.Response]:
        """A GET read as it comes (server-sent events), a success or a BridgeError."""
        timeout = httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0), read=read_timeout)
        try:
            async with self._client.stream(
                "GET", path, headers=dict(headers or {}), timeout=timeout
            ) as response:
                if not response.is_success:
                    await response.aread()
                    raise self.failure(response)
                yield response
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from None

    async def close(self) -> None:
        await self._client.aclose()


__all__ = ["Http", "describe"]
