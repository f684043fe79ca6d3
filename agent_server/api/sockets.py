"""/sockets/events/{conversation_id}: a conversation's events, live, over a websocket.

Authentication, in order of preference: the `X-Session-API-Key` header; a first frame
`{"type": "auth", "session_api_key": "..."}` within a few seconds (browsers cannot set
headers); the `session_api_key` query parameter (least safe: URLs end up in logs and
histories). A wrong or missing key closes with 4001, an unknown conversation with 4004.

The first frame is the conversation's state (a `full_state` ConversationStateUpdateEvent, as
the OpenHands SDK expects); each one after is one event, exactly as events search returns it.
`after_id` replays every stored event after that id, `resend_all=true` every stored event, then
live ones follow with no gap and no duplicate: the subscription is taken first, the replay read
from the log, and what arrived meanwhile is skipped up to the last id sent. Transient frames
(`full_state` snapshots, streaming deltas, errors about this client's own frames) have ids of
their own that are not in the log; resume from the last stored event's id. A running tool's
output (deltas with `tool_call_id` and `output`) comes only with `progress=true`: it is not
in SPEC 6.2's shape of a delta, which other clients (the OpenHands SDK) validate.

A client frame `{"role": "user", "content": [...], "run": bool}` is a user message; anything
else is answered with a ServerErrorEvent frame (not stored) and the socket stays open.

A client that falls behind is closed with 1013, the reason naming the `after_id` to resume
from. Behind means any of: its queue passed its bounds (ws_queue_events, ws_queue_bytes); one
frame could not be handed to the socket within ws_send_timeout (the kernel's buffers, which
hide a backlog from the queue, are full and the client is not reading); or it left a ping
unanswered for 20 s (agent_server.websocket, which also sends the close ahead of the backlog).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode
from uuid import UUID

from pydantic import ValidationError
from starlette import status
from starlette.websockets import WebSocket

from agent_server.api.io import services
from agent_server.auth import HEADER, KeyRing
from agent_server.conversations import Conversation, ConversationService
from agent_server.delivery import Frame, Subscription, SubscriptionEnded, SubscriptionState
from agent_server.log import EventLog
from agent_server.record import SendMessage
from core.ids import EVENT_ID as _EVENT_ID
from core.ids import new_event_id
from events import ServerErrorEvent, format_timestamp
from web.errors import (
    InvalidInput,
    LimitReached,
    NotFound,
    ServiceError,
    Unauthorized,
    invalid,
    validation_text,
)
from web.io import parse_json

#: The codes a socket closes with after its handshake (errors during it are raised, and
#: closed with their class's code by `web.errors`' handler).
CLOSE_NOT_FOUND = NotFound.ws_close_code
CLOSE_TRY_AGAIN = LimitReached.ws_close_code
CLOSE_RESTART = status.WS_1012_SERVICE_RESTART
logger = logging.getLogger(__name__)
QUERY_KEY = "session_api_key"
_REPLAY_EVENTS = 256
_REPLAY_BYTES = 1024 * 1024
_CLOSE_SECONDS = 30.0
#: Where the resume point of a socket is kept in its ASGI scope, for the protocol's own close
#: (agent_server.websocket) as much as for this module's.
RESUME_AFTER = "agent_server.resume_after"
#: Where the protocol finds what to call when it closes a socket for an unanswered ping, so
#: that close is counted with the route's own drops.
PING_TIMED_OUT = "agent_server.ping_timed_out"


async def events_socket(websocket: WebSocket) -> None:
    state = services(websocket)
    delivery = state.delivery
    query_key = _take_query_key(websocket)
    await websocket.accept()
    if not await _authenticate(websocket, query_key, state.keys, delivery.settings.ws_auth_timeout):
        raise Unauthorized("missing or wrong session key")
    conv = _conversation(websocket, state.conversations)
    if conv is None:
        raise NotFound("conversation not found")
    start = _start(websocket)
    progress = _flag(websocket, "progress")
    log = await conv.log()  # ConversationGone (a NotFound) when it was deleted meanwhile
    sub = delivery.pubsub.subscribe(conv.id)  # TooManySubscribers (a LimitReached)
    # No await between subscribing and this snapshot: every event below `end` was published
    # before the subscription, every later one is in its queue.
    end = len(log)
    websocket.scope[PING_TIMED_OUT] = sub.ping_timed_out
    session = _Session(websocket, conv, log, sub, delivery.settings.ws_send_timeout, progress)
    try:
        await session.run(start, end)
    finally:
        sub.close()


def _take_query_key(websocket: WebSocket) -> str | None:
    """The key of the query string, taken out of it: uvicorn logs a websocket's path with its
    query string, and a key must never reach a log."""
    scope = websocket.scope
    pairs = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    key = next((value for name, value in pairs if name == QUERY_KEY), None)
    if key is not None:
        scope["query_string"] = urlencode([(n, v) for n, v in pairs if n != QUERY_KEY]).encode()
    return key


async def _authenticate(
    websocket: WebSocket, query_key: str | None, keys: KeyRing, timeout: float
) -> bool:
    header = websocket.headers.get(HEADER)
    if header is not None:
        return keys.accepts(header)
    if query_key is not None:
        return keys.accepts(query_key)
    try:
        message = await asyncio.wait_for(websocket.receive(), timeout)
    except TimeoutError:
        return False
    if message["type"] != "websocket.receive" or message.get("text") is None:
        return False
    try:
        data = parse_json(message["text"], "frame")
    except InvalidInput:
        return False
    if not isinstance(data, dict) or data.get("type") != "auth":
        return False
    key = data.get("session_api_key")
    return isinstance(key, str) and keys.accepts(key)


def _conversation(websocket: WebSocket, service: ConversationService) -> Conversation | None:
    try:
        return service.get(UUID(websocket.path_params["conversation_id"]))
    except ValueError:
        return None


def _flag(websocket: WebSocket, name: str) -> bool:
    value = websocket.query_params.get(name, "false").strip().lower()
    if value not in ("true", "1", "false", "0", ""):
        raise invalid(["query", name], f"{name} must be true or false")
    return value in ("true", "1")


def _start(websocket: WebSocket) -> str | None:
    """Where the replay starts: "" for the beginning, an id to follow, None for live only."""
    resend = _flag(websocket, "resend_all")
    after = websocket.query_params.get("after_id")
    if after:
        if not _EVENT_ID.match(after):
            raise invalid(["query", "after_id"], "after_id must be an event id")
        return after
    return "" if resend else None


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    # A peer that does not read cannot take the close frame either: do not wait for ever.
    with contextlib.suppress(Exception):
        await asyncio.wait_for(websocket.close(code, reason[:120]), _CLOSE_SECONDS)


class _Session:
    """One socket after the handshake: a sender task, a reader task, and why they ended."""

    def __init__(
        self,
        websocket: WebSocket,
        conv: Conversation,
        log: EventLog,
        sub: Subscription,
        send_timeout: float,
        progress: bool,
    ) -> None:
        self.websocket = websocket
        #: Whether this client asked for running tools' output (`progress=true`).
        self.progress = progress
        self.conv = conv
        self.log = log
        self.sub = sub
        self.send_timeout = send_timeout
        #: Set when a frame could not be handed to the socket in time.
        self.behind = False
        self._last_sent: str | None = None

    @property
    def last_sent(self) -> str | None:
        return self._last_sent

    @last_sent.setter
    def last_sent(self, event_id: str | None) -> None:
        self._last_sent = event_id
        self.websocket.scope[RESUME_AFTER] = event_id

    async def _put(self, text: str) -> None:
        """One frame to the socket; a client that leaves it unsent for send_timeout is behind."""
        try:
            await asyncio.wait_for(self.websocket.send_text(text), self.send_timeout)
        except TimeoutError:
            if not self.behind:
                self.sub.send_timed_out()
            self.behind = True
            raise

    async def run(self, start: str | None, end: int) -> None:
        sender = asyncio.create_task(self._send(start, end))
        reader = asyncio.create_task(self._read())
        overflow = asyncio.create_task(self.sub.ended.wait())
        deleted = asyncio.create_task(self.conv.closed.wait())
        tasks = {sender, reader, overflow, deleted}
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self.conv.closed.is_set() and self.sub.state is not SubscriptionState.CLOSED:
            await _close(self.websocket, CLOSE_NOT_FOUND, "conversation deleted")
        elif self.sub.state is SubscriptionState.OVERFLOWED or self.behind:
            hint = f"; resume with after_id={self.last_sent}" if self.last_sent else ""
            await _close(self.websocket, CLOSE_TRY_AGAIN, "fell behind" + hint)
        elif self.sub.state is SubscriptionState.CLOSED:
            await _close(self.websocket, CLOSE_RESTART, "server shutting down")

    async def _send(self, start: str | None, end: int) -> None:
        try:
            await self._send_all(start, end)
        except TimeoutError:
            return  # behind (self.behind): run() closes with 1013

    async def _send_all(self, start: str | None, end: int) -> None:
        log = self.log
        # First the conversation's state as it is now (a `full_state` ConversationStateUpdateEvent,
        # not stored): the OpenHands SDK client counts the socket ready only once it has it.
        await self._put(self.conv.shown.state_event().model_dump_json())
        if start:
            self.last_sent = start  # nothing up to after_id, even from the live queue
        if start is not None:
            position = log.position_after(start) if start else 0
            while position < end:
                if self.conv.closed.is_set():
                    return  # deleted: its log is closed (the watcher closes the socket)
                lines = log.lines_after(
                    position, min(_REPLAY_EVENTS, end - position), _REPLAY_BYTES
                )
                for line in lines:
                    await self._put(line.decode())
                    self.last_sent = log.id_at(position)
                    position += 1
        try:
            while True:
                frame = await self.sub.get()
                if frame.event_id is not None:
                    if self.last_sent is not None and frame.event_id <= self.last_sent:
                        self.sub.sent()
                        continue  # already sent by the replay
                    await self._put(frame.text)
                    self.last_sent = frame.event_id
                elif not frame.progress or self.progress:
                    await self._put(frame.text)
                self.sub.sent()
        except SubscriptionEnded:
            return

    async def _read(self) -> None:
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                self._error("InvalidFrame", "binary frames are not accepted; send JSON text")
                continue
            await self._on_text(text)

    async def _on_text(self, text: str) -> None:
        try:
            data: Any = parse_json(text, "frame")
        except InvalidInput as exc:
            self._error("InvalidFrame", f"not JSON: {exc.errors[0]['msg'][:200]}")
            return
        if isinstance(data, dict) and data.get("type") == "auth":
            return  # already authenticated
        if not isinstance(data, dict) or data.get("role") != "user":
            self._error(
                "InvalidFrame",
                'expected a user message {"role": "user", "content": [...], "run": false}',
            )
            return
        try:
            message = SendMessage.model_validate_json(text, strict=True)
        except ValidationError as exc:
            self._error("InvalidFrame", validation_text(exc)[:2000])
            return
        try:
            # Shielded: a socket closing mid-way must not cut a message half sent.
            await asyncio.shield(self.conv.send_message(message))
        except ServiceError as exc:
            self._error(type(exc).__name__, exc.detail[:2000])
        except Exception:  # never a traceback to the client; the socket stays open
            logger.exception("a message over the socket of %s failed", self.conv.id)
            self._error("InternalError", "the message could not be sent")

    def _error(self, code: str, detail: str) -> None:
        event = ServerErrorEvent(
            source="environment",
            code=code,
            detail=detail,
            id=new_event_id(),
            timestamp=format_timestamp(datetime.now(UTC)),
        )
        # Bounded like every other frame: a client that sends junk and never reads is cut off.
        self.sub.offer(Frame.transient(event))


__all__ = ["CLOSE_NOT_FOUND", "CLOSE_TRY_AGAIN", "RESUME_AFTER", "events_socket"]
