"""Conversation-info notices: the OpenHands agent server's second webhook.

When a conversation starts, is paused, updated or deleted, its info is posted to
`{webhook}/conversations` so that a control plane learns of a conversation made straight on this
server (a Cloud workspace client does that) before its first event arrives. One worker sends them in
the order they were given, a few tries each; the queue is bounded and a notice that does not fit is
dropped (the next one carries the conversation's state, and the events' webhook is the durable
path).
"""

from __future__ import annotations

import asyncio
import logging

from agent_server.delivery.http import WebhookClient, WebhookUnreachable

logger = logging.getLogger(__name__)
#: Notices waiting at once; more are dropped.
NOTICES = 64
#: Tries of one notice, `RETRY` seconds apart.
TRIES = 3
RETRY = 1.0


class Notices:
    def __init__(self, client: WebhookClient) -> None:
        self.client = client
        self._queue: asyncio.Queue[bytes] = asyncio.Queue(NOTICES)
        self._worker: asyncio.Task[None] | None = None

    def post(self, info: bytes) -> None:
        """Queue one conversation's info (JSON); never waits."""
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._run())
        try:
            self._queue.put_nowait(info)
        except asyncio.QueueFull:
            logger.info("a conversation's info notice was dropped: %d are waiting", NOTICES)

    async def _run(self) -> None:
        while True:
            info = await self._queue.get()
            for attempt in range(TRIES):
                try:
                    reply = await self.client.post_conversation(info)
                    if reply.ok or not reply.retryable:
                        break
                except WebhookUnreachable:
                    pass
                if attempt + 1 < TRIES:
                    await asyncio.sleep(RETRY)
            else:
                logger.info("the conversation webhook did not take a conversation's info")

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
