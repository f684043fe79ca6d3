"""A real webhook receiver (SPEC 4.5) on a loopback port: what the control plane would run.

    receiver = Receiver(api_key="hook-key", secret="whsec_...").start()
    env = {"AGENT_SERVER_WEBHOOK_URL": receiver.base_url, ...}
    receiver.ids(conversation_id)       # event ids it accepted, in arrival order (repeats kept)

Every body is checked strictly, as the control plane would: the path's conversation_id is a
UUID; the X-Session-API-Key header is the expected key (401 otherwise); with a secret, the
Standard Webhooks signature is valid (401 otherwise); the body is a JSON array whose elements
each are one of the 19 event kinds, unknown fields rejected (422 HTTPValidationError
otherwise). It can be told to be down (its port closed), to answer an error some number of
times (500, or 429 with Retry-After), to refuse every batch, or to answer slowly.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from events.kinds import EVENT_LIST_ADAPTER
from tests.support.llm import free_port
from tests.support.threaded import ThreadedServer
from web.errors import from_pydantic

PATH = "/api/v1/webhooks"
TOLERANCE = 300  # seconds a signature's timestamp may be off (Standard Webhooks' default)


@dataclass
class Attempt:
    """One request, whatever was answered."""

    conversation_id: str
    status: int
    at: float
    headers: dict[str, str]
    detail: Any = None


@dataclass
class Batch:
    """One accepted request."""

    conversation_id: str
    events: list[dict[str, Any]]
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def _key(secret: str) -> bytes:
    return base64.b64decode(secret[6:]) if secret.startswith("whsec_") else secret.encode()


class Receiver:
    def __init__(
        self,
        api_key: str | None = None,
        secret: str | None = None,
        validate: bool = True,
        port: int | None = None,
    ) -> None:
        self.api_key = api_key
        self.secret = secret
        self.validate = validate
        self.port = port or free_port()
        self.batches: list[Batch] = []
        #: The conversation infos posted to /conversations (OpenHands' conversation webhook).
        self.infos: list[dict[str, Any]] = []
        self.attempts: list[Attempt] = []
        self.delay = 0.0
        #: Answered to every request while set (a receiver that refuses every batch).
        self.refuse: tuple[int, str] | None = None
        self._script: deque[tuple[int, dict[str, str]]] = deque()
        self._lock = threading.Lock()
        self._server: ThreadedServer | None = None

    @property
    def base_url(self) -> str:
        """What AGENT_SERVER_WEBHOOK_URL is set to (events go to {base_url}/events/{id})."""
        return f"http://127.0.0.1:{self.port}{PATH}"

    # -- telling it what to do -------------------------------------------------------------------

    def fail(self, status: int, times: int = 1, retry_after: float | None = None) -> None:
        """Answer the next `times` requests with `status` (and Retry-After, when given)."""
        headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
        with self._lock:
            self._script.extend([(status, headers)] * times)

    def down(self) -> None:
        """Close the port: requests are refused at connect."""
        self.stop()

    def up(self) -> Receiver:
        return self.start()

    # -- what it got -------------------------------------------------------------------------------

    def events(self, conversation_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [
                e for b in self.batches if b.conversation_id == conversation_id for e in b.events
            ]

    def ids(self, conversation_id: str) -> list[str]:
        return [e["id"] for e in self.events(conversation_id)]

    def unique_ids(self, conversation_id: str) -> list[str]:
        """Accepted ids with repeats removed, as a receiver that dedupes by id keeps them."""
        seen: dict[str, None] = {}
        for event_id in self.ids(conversation_id):
            seen.setdefault(event_id, None)
        return list(seen)

    def attempts_for(self, conversation_id: str) -> list[Attempt]:
        with self._lock:
            return [a for a in self.attempts if a.conversation_id == conversation_id]

    def count(self) -> int:
        with self._lock:
            return sum(len(b.events) for b in self.batches)

    # -- serving -----------------------------------------------------------------------------------

    async def _receive(self, request: Request) -> Response:
        import asyncio

        raw_id = request.path_params["conversation_id"]
        body = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        if self.delay:
            await asyncio.sleep(self.delay)
        status, reply = self._check(raw_id, body, headers)
        with self._lock:
            self.attempts.append(Attempt(raw_id, status, time.time(), headers, reply))
        if status != 200:
            extra = reply.pop("_headers", {}) if isinstance(reply, dict) else {}
            return JSONResponse(reply, status_code=status, headers=extra)
        return JSONResponse({"success": True})

    async def _info(self, request: Request) -> Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        if self.api_key is not None and not hmac.compare_digest(
            headers.get("x-session-api-key", "").encode(), self.api_key.encode()
        ):
            return JSONResponse({"detail": "Invalid X-Session-API-Key"}, status_code=401)
        body = await request.body()
        if self.secret is not None and (problem := self._bad_signature(body, headers)):
            return JSONResponse({"detail": problem}, status_code=401)
        with self._lock:
            self.infos.append(json.loads(body))
        return JSONResponse({"success": True})

    def _check(self, raw_id: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        try:
            UUID(raw_id)
        except ValueError:
            return 422, {
                "detail": [
                    {
                        "loc": ["path", "conversation_id"],
                        "msg": "Input should be a valid UUID",
                        "type": "uuid_parsing",
                        "input": raw_id,
                    }
                ]
            }
        if self.api_key is not None and not hmac.compare_digest(
            headers.get("x-session-api-key", "").encode(), self.api_key.encode()
        ):
            return 401, {"detail": "Invalid X-Session-API-Key"}
        if self.secret is not None:
            problem = self._bad_signature(body, headers)
            if problem:
                return 401, {"detail": problem}
        with self._lock:
            if self._script:
                status, extra = self._script.popleft()
                return status, {"detail": f"scripted {status}", "_headers": extra}
        if self.refuse is not None:
            return self.refuse[0], {"detail": self.refuse[1]}
        if self.validate:
            try:
                EVENT_LIST_ADAPTER.validate_json(body)
            except ValidationError as exc:
                return 422, {"detail": from_pydantic(exc, "body").errors}
        try:
            events = json.loads(body)
        except ValueError:
            return 422, {
                "detail": [{"loc": ["body"], "msg": "JSON decode error", "type": "json_invalid"}]
            }
        if not isinstance(events, list):
            return 422, {
                "detail": [
                    {"loc": ["body"], "msg": "Input should be a valid list", "type": "list_type"}
                ]
            }
        with self._lock:
            self.batches.append(Batch(raw_id, events, body, headers))
        return 200, None

    def _bad_signature(self, body: bytes, headers: dict[str, str]) -> str | None:
        assert self.secret is not None
        msg_id, stamp, signatures = (
            headers.get("webhook-id"),
            headers.get("webhook-timestamp"),
            headers.get("webhook-signature"),
        )
        if not (msg_id and stamp and signatures):
            return "missing webhook-id, webhook-timestamp or webhook-signature"
        try:
            if abs(time.time() - int(stamp)) > TOLERANCE:
                return "webhook-timestamp too far from now"
        except ValueError:
            return "webhook-timestamp is not an integer"
        signed = f"{msg_id}.{stamp}.".encode() + body
        expected = base64.b64encode(hmac.new(_key(self.secret), signed, hashlib.sha256).digest())
        for candidate in signatures.split(" "):
            version, _, value = candidate.partition(",")
            if version == "v1" and hmac.compare_digest(value.encode(), expected):
                return None
        return "no valid v1 signature"

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route(PATH + "/events/{conversation_id}", self._receive, methods=["POST"]),
                Route(PATH + "/conversations", self._info, methods=["POST"]),
            ]
        )

    def start(self) -> Receiver:
        self._server = ThreadedServer(self.app(), self.port, "webhook receiver")
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        self._server = None
