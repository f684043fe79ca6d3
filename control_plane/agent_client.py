"""AgentClient: the control plane's only way to reach an agent server (HTTP, its session key).

One object with one connection pool, timeouts on every call and a swappable transport (tests
and other providers can route requests elsewhere). Failures become `AgentError`s that carry the
agent server's status, so routes can pass a 404 on as a 404 and anything else as a 502.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

from web.telemetry.http import trace_headers

HEADER = "X-Session-API-Key"
#: Seconds before each new try of a creation whose connection broke before an answer came.
CREATE_PAUSES = (0.1, 0.5)


class AgentError(Exception):
    """The agent server refused a call (`status` set) or could not be reached (`status` None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Target:
    """One agent server: where it is and the key it takes."""

    url: str
    session_api_key: str


@dataclass(frozen=True)
class Raw:
    """An answer passed through as it came (file reads, diffs)."""

    status: int
    content: bytes
    media_type: str


class AgentClient:
    def __init__(
        self, timeout: float = 30.0, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=5.0), transport=transport
        )

    async def _request(self, target: Target, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return await self._http.request(
                method,
                target.url + path,
                # The start's trace (a conversation created here joins it).
                headers={HEADER: target.session_api_key, **trace_headers()},
                **kw,
            )
        except httpx.HTTPError as exc:
            raise AgentError(
                f"the agent server could not be reached: {type(exc).__name__}"
            ) from None

    async def _json(self, target: Target, method: str, path: str, **kw: Any) -> Any:
        response = await self._request(target, method, path, **kw)
        if response.status_code >= 400:
            raise AgentError(
                f"the agent server answered {response.status_code}: {response.text[:500]}",
                response.status_code,
            )
        return response.json()

    async def create_conversation(self, target: Target, body: dict[str, Any]) -> dict[str, Any]:
        """Tried again when the connection broke before an answer (a kept-alive connection
        the server closed as it was reused: seen under load): the body names the
        conversation's id, and the server answers a second creation with the first."""
        for pause in (*CREATE_PAUSES, None):
            try:
                data: dict[str, Any] = await self._json(
                    target, "POST", "/api/conversations", json=body
                )
                return data
            except AgentError as exc:
                if exc.status is not None or pause is None or "conversation_id" not in body:
                    raise
            await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    async def get_conversation(self, target: Target, conversation_id: str) -> dict[str, Any]:
        data: dict[str, Any] = await self._json(
            target, "GET", f"/api/conversations/{conversation_id}"
        )
        return data

    async def last_error(self, target: Target, conversation_id: str) -> str | None:
        """The detail of the conversation's latest ConversationErrorEvent (masked by the agent
        server with the conversation's secrets), cut; None when there is none."""
        found = await self._json(
            target,
            "GET",
            f"/api/conversations/{conversation_id}/events/search",
            params={
                "kind__eq": "ConversationErrorEvent",
                "limit": "1",
                "sort_order": "TIMESTAMP_DESC",
            },
        )
        items = found.get("items") if isinstance(found, dict) else None
        detail = items[0].get("detail") if items and isinstance(items[0], dict) else None
        return detail[:1500] if isinstance(detail, str) and detail else None

    async def send_message(
        self, target: Target, conversation_id: str, message: dict[str, Any]
    ) -> None:
        await self._json(
            target, "POST", f"/api/conversations/{conversation_id}/events", json=message
        )

    async def post(self, target: Target, path: str, body: dict[str, Any] | None = None) -> Any:
        """A control call (pause, interrupt, confirmation) answered with JSON."""
        return await self._json(target, "POST", path, json=body if body is not None else {})

    async def delete_conversation(self, target: Target, conversation_id: str) -> None:
        response = await self._request(target, "DELETE", f"/api/conversations/{conversation_id}")
        if response.status_code >= 400 and response.status_code != 404:
            raise AgentError(
                f"the agent server answered {response.status_code}", response.status_code
            )

    async def patch_settings(self, target: Target, settings: dict[str, Any]) -> None:
        await self._json(target, "PATCH", "/api/settings", json=settings)

    async def raw_get(self, target: Target, path: str, params: dict[str, str]) -> Raw:
        """GET passed through (work inspection): the status and body as the agent server gave
        them."""
        response = await self._request(target, "GET", path, params=params)
        media = response.headers.get("content-type", "application/octet-stream")
        return Raw(response.status_code, response.content, media)

    async def close(self) -> None:
        await self._http.aclose()
