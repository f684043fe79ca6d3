"""The webhook's transport seam: one outbound HTTP client, its signature and its answers.

Kept apart from the delivery logic (webhook.py) so that tests, and anyone sending to the same
receiver, swap the network without touching batching or retries:
`WebhookClient(..., transport=httpx.MockTransport(handler))`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_server import __version__, tls
from core.retry import Clock, parse_retry_after
from core.signing import sign, signing_key

if TYPE_CHECKING:
    import httpx


class WebhookError(Exception):
    """A webhook request did not get an answer."""


class WebhookUnreachable(WebhookError):
    """Connection refused or reset, DNS failure, timeout: no HTTP answer at all."""


@dataclass(frozen=True)
class Reply:
    """What the receiver answered."""

    status: int
    text: str
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def retryable(self) -> bool:
        """Worth retrying on the backoff schedule (the rest are refusals of the batch)."""
        return self.status in (408, 429) or self.status >= 500


class WebhookClient:
    """The one outbound HTTP client of the webhook: timeouts set, transport swappable.

    Tests aim it at a local receiver by `base_url`, or replace the network entirely with
    `transport=httpx.MockTransport(handler)`.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        secret: str | None = None,
        *,
        sender: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Clock | None = None,
        max_connections: int = 32,
    ) -> None:
        """`api_key`: sent as X-Session-API-Key (None: no key at all; a signed delivery needs
        none); `secret`: the Standard Webhooks signature's key; `sender`: who this server is
        to the receiver (X-Webhook-Sender), so it knows whose secret to check with."""
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._sender = sender
        self._key = signing_key(secret) if secret else None
        self._clock = clock or Clock()
        import httpx  # only a server with a webhook pays for importing it

        self._http = httpx.AsyncClient(
            transport=transport,
            verify=tls.client_context(),
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0), pool=None),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            follow_redirects=False,
        )

    def url(self, conversation_id: str) -> str:
        return f"{self.base_url}/events/{conversation_id}"

    def headers(self, message_id: str, body: bytes) -> dict[str, str]:
        headers = {
            "content-type": "application/json",
            "user-agent": f"agent-server/{__version__}",
        }
        if self._api_key:
            headers["x-session-api-key"] = self._api_key
        if self._sender:
            headers["x-webhook-sender"] = self._sender
        if self._key is not None:
            stamp = int(self._clock.time())
            headers["webhook-id"] = message_id
            headers["webhook-timestamp"] = str(stamp)
            headers["webhook-signature"] = sign(self._key, message_id, stamp, body)
        return headers

    async def post(self, conversation_id: str, body: bytes, message_id: str) -> Reply:
        import httpx

        try:
            response = await self._http.post(
                self.url(conversation_id), content=body, headers=self.headers(message_id, body)
            )
        except httpx.HTTPError as exc:  # no answer: connect, read, write or protocol failure
            raise WebhookUnreachable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from exc
        return Reply(
            status=response.status_code,
            text=response.text[:1000],
            retry_after=parse_retry_after(response.headers.get("retry-after"), self._clock.time()),
        )

    async def post_conversation(self, body: bytes) -> Reply:
        """A conversation's info to `{base}/conversations` (the OpenHands agent server's
        conversation webhook: the control plane records conversations made here)."""
        import httpx

        try:
            response = await self._http.post(
                f"{self.base_url}/conversations",
                content=body,
                headers=self.headers(str(uuid.uuid4()), body),
            )
        except httpx.HTTPError as exc:
            raise WebhookUnreachable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from exc
        return Reply(status=response.status_code, text=response.text[:1000])

    async def aclose(self) -> None:
        await self._http.aclose()


__all__ = ["Reply", "WebhookClient", "WebhookError", "WebhookUnreachable", "sign", "signing_key"]
