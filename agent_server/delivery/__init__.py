"""Live delivery: websocket subscribers (PubSub) and the webhook push, both fed by the log.

`Delivery` is each conversation's Fanout: every log is opened with a sink that feeds PubSub
after each durable write, and gets a webhook Pusher once open; transient events (streaming
deltas, masked by the conversation) go to PubSub only. At start, conversations whose logs hold
events the webhook has not acknowledged are opened so that they are pushed; at shutdown the webhook
flushes for a few seconds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

from agent_server.config import DeliverySettings
from agent_server.delivery.http import WebhookClient
from agent_server.delivery.notices import Notices
from agent_server.delivery.pubsub import (
    Frame,
    PubSub,
    Subscription,
    SubscriptionEnded,
    SubscriptionState,
    TooManySubscribers,
)
from agent_server.delivery.webhook import Pusher, Webhook, needs_push
from agent_server.log import EventLog, Listener
from agent_server.record import WebhookStatus, WebhookTotals
from core.retry import Backoff, Clock
from events import Event

logger = logging.getLogger(__name__)
#: Longest a state change waits for the sockets to carry its snapshot (Delivery.delivered).
DELIVERED_WAIT = 1.0
DELIVERED_GRACE = 0.05


class Behind(Protocol):
    """What resuming the webhook needs of a conversation at start."""

    @property
    def id(self) -> str: ...

    directory: Path
    closed: asyncio.Event

    async def log(self) -> EventLog: ...


class Delivery:
    """Feeds sockets and the webhook from the conversations' logs (the Fanout of
    agent_server.conversations): it never reaches into a conversation."""

    def __init__(
        self,
        settings: DeliverySettings,
        webhook_url: str | None = None,
        webhook_api_key: str | None = None,
        webhook_secret: str | None = None,
        *,
        sender: str | None = None,
        client: WebhookClient | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = s = settings
        self.pubsub = PubSub(s.ws_max_subscribers, s.ws_queue_events, s.ws_queue_bytes)
        self.webhook: Webhook | None = None
        if client is None and webhook_url:
            assert webhook_api_key or webhook_secret, "a webhook needs a key or a secret"
            client = WebhookClient(
                webhook_url,
                webhook_api_key,
                webhook_secret,
                sender=sender,
                timeout=s.webhook_timeout,
                clock=clock,
                max_connections=s.webhook_concurrency,
            )
        if client is not None:
            self.webhook = Webhook(
                client,
                batch_events=s.webhook_batch_events,
                batch_seconds=s.webhook_batch_ms / 1000,
                batch_bytes=s.webhook_batch_bytes,
                backoff=Backoff(s.webhook_retry_min, max(s.webhook_retry_min, s.webhook_retry_max)),
                clock=clock,
                concurrency=s.webhook_concurrency,
            )
        self._scan: asyncio.Task[None] | None = None
        self._notices = None if client is None else Notices(client)

    # -- the Fanout of each conversation -------------------------------------------------------

    def sinks(self, conversation_id: str) -> list[Listener]:
        def publish(written: Sequence[tuple[Event, bytes]]) -> None:
            if self.pubsub.has_subscribers(conversation_id):
                self.pubsub.publish(
                    conversation_id, [Frame.stored(e.id or "", line) for e, line in written]
                )

        return [publish]

    def attach(
        self, conversation_id: str, directory: Path, log: EventLog, closed: asyncio.Event
    ) -> None:
        if self.webhook is not None:
            self.webhook.watch(conversation_id, directory, log, lambda: not closed.is_set())

    def publish_transient(self, conversation_id: str, event: Event) -> None:
        """Already masked by the conversation's EventSink."""
        if self.pubsub.has_subscribers(conversation_id):
            self.pubsub.publish(conversation_id, [Frame.transient(event)])

    async def delivered(self, conversation_id: str) -> None:
        """Until the sockets were written what was published so far (about a second at most),
        and a moment more: a client reading its socket in another thread (the OpenHands SDK)
        takes the frame in while its request's answer is on the way, not after."""
        if self.pubsub.has_subscribers(conversation_id):
            await self.pubsub.delivered(conversation_id, DELIVERED_WAIT)
            await asyncio.sleep(DELIVERED_GRACE)

    def notify(self, info: bytes) -> None:
        """Post a conversation's info (JSON) to the webhook's `/conversations` (notices.py)."""
        if self._notices is not None:
            self._notices.post(info)

    def forget(self, conversation_id: str) -> None:
        if self.webhook is not None:
            self.webhook.forget(conversation_id)

    def status(self, conversation_id: str) -> WebhookStatus | None:
        if self.webhook is None:
            return None
        pusher = self.webhook.pushers.get(conversation_id)
        return None if pusher is None else pusher.status

    # -- start and stop --------------------------------------------------------------------------

    async def start(self, conversations: Callable[[], Iterable[Behind]]) -> None:
        """Begin pushing what earlier runs left unacknowledged (in the background)."""
        if self.webhook is not None:
            self._scan = asyncio.create_task(self._resume(conversations), name="webhook resume")

    async def _resume(self, conversations: Callable[[], Iterable[Behind]]) -> None:
        """Open the logs of conversations the webhook is behind on; note the others' cursors.

        Only a cursor file and the tail of each log are read: logs that are caught up stay
        closed (start-up cost does not grow with history).
        """
        assert self.webhook is not None
        for conv in conversations():
            if conv.id in self.webhook.pushers:
                continue  # its log was opened meanwhile: it is being pushed already
            try:
                behind = await asyncio.to_thread(needs_push, conv.directory)
            except OSError as exc:
                logger.warning("cannot tell whether %s needs a webhook push: %s", conv.id, exc)
                behind = True
            if conv.closed.is_set() or conv.id in self.webhook.pushers:
                continue
            if behind:
                try:
                    await conv.log()
                except Exception:
                    logger.exception("cannot open the log of %s to push it", conv.id)
            else:
                self.webhook.pusher(conv.id, conv.directory, _open_while(conv.closed))

    async def flush(self) -> None:
        """At shutdown, after the runs stopped and before the logs close: end the sockets'
        subscriptions and give the webhook a few seconds to send what the logs hold."""
        self.pubsub.close_all()
        if self._scan is not None:
            self._scan.cancel()
            await asyncio.gather(self._scan, return_exceptions=True)
        if self.webhook is not None:
            await self.webhook.flush(self.settings.shutdown_flush)

    async def close(self) -> None:
        if self._notices is not None:
            await self._notices.close()
        if self.webhook is not None:
            await self.webhook.stop()
            await self.webhook.client.aclose()

    # -- reporting -------------------------------------------------------------------------------

    def totals(self) -> WebhookTotals | None:
        return None if self.webhook is None else self.webhook.totals()


__all__ = [
    "Backoff",
    "Clock",
    "Delivery",
    "DeliverySettings",
    "Frame",
    "PubSub",
    "Pusher",
    "Subscription",
    "SubscriptionEnded",
    "SubscriptionState",
    "TooManySubscribers",
    "Webhook",
    "WebhookClient",
    "WebhookUnreachable",
]


def _open_while(closed: asyncio.Event) -> Callable[[], bool]:
    """Bound per conversation (a closure over a loop variable would see the last one's)."""
    return lambda: not closed.is_set()
