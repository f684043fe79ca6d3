"""uvicorn's websocket protocol, with the two changes a client that falls behind needs.

A client that stops reading fills the kernel's buffers, then the transport's, and uvicorn
holds every send until they drain. Two things then went wrong: the 1013 close the socket
route sends (with the `after_id` to resume from) waited behind the very backlog it was
closing for, and uvicorn's keepalive ping, also stuck behind it, timed out first and closed
with 1011 "keepalive ping timeout", which tells the client nothing. Here a close frame is
written at once (it still reaches the client after every frame sent before it, as TCP keeps
order), and an unanswered ping closes with 1013 and the resume point the route keeps in the
scope (agent_server.api.sockets.RESUME_AFTER); it is counted in /metrics' drops as the
route's own are.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from agent_server.api.sockets import CLOSE_TRY_AGAIN, PING_TIMED_OUT, RESUME_AFTER


class WebSocketProtocol(WebSocketsSansIOProtocol):
    async def send(self, message: Any) -> None:
        if (
            message["type"] == "websocket.close"
            and self.handshake_complete
            and self.initial_response is None
            and not self.close_sent
            and not self.disconnected
            and not self.writable.is_set()
        ):
            self._close_now(message.get("code", 1000), message.get("reason") or "")
            return
        await super().send(message)

    def keepalive_timeout(self) -> None:
        self.pong_timer = None
        self.pending_ping_payload = None
        if self.close_sent or self.transport.is_closing():
            return
        after = self.scope.get(RESUME_AFTER)
        reason = f"fell behind: a ping unanswered for {self.ping_timeout or 0:g} s"
        if after:
            reason += f"; resume with after_id={after}"
        self.conn.fail(CLOSE_TRY_AGAIN, reason)
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        self.transport.close()
        count = self.scope.get(PING_TIMED_OUT)
        if callable(count):
            count()

    def _close_now(self, code: int, reason: str) -> None:
        """What uvicorn does for websocket.close, without waiting for the buffers to drain."""
        if self.transport.is_closing():
            return
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
        self.conn.send_close(code, reason)
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()
        self.close_timer = self.loop.call_later(self.close_timeout, self.transport.close)
