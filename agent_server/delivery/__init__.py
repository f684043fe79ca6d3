"""Live delivery: websocket subscribers (PubSub) and the webhook push, both fed by the log.

`Delivery` wires a ConversationService to them: every log, as it is opened, feeds PubSub after
each durable write and gets a webhook Pusher; transient events (streaming deltas) go to PubSub
only. At start, conversations whose logs hold events the webhook has not acknowledged are
opened so that they are pushed; at shutdown the webhook flushes for a few seconds.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from agent_server.config import Config
from agent_server.conversations import Conversation, ConversationService
from agent_server.delivery.pubsub import (
    Frame,
    PubSub,
    Subscription,
    SubscriptionEnded,
    SubscriptionState,
    TooManySubscribers,
)
from agent_server.delivery.webhook import (
    Backoff,
    Clock,
    Pusher,
    Webhook,
    WebhookClient,
    WebhookUnreachable,
    needs_push,
)
from agent_server.events import Event
from agent_server.log import EventLog
from agent_server.models import WebhookTotals

logger = logging.getLogger(__name__)

ENV_PREFIX = "AGENT_SERVER_"


class DeliverySettings(BaseModel):
    """Limits and schedules of delivery. Each field can be set by the variable
    AGENT_SERVER_<FIELD NAME IN CAPITALS>, e.g. AGENT_SERVER_WS_QUEUE_EVENTS=1000."""

    model_config = ConfigDict(frozen=True)

    ws_queue_events: int = Field(default=4096, ge=1)
    """Events a socket may have waiting to be sent; past it the socket closes with 1013."""

    ws_queue_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """Bytes a socket may have waiting to be sent; past it the socket closes with 1013."""

    ws_max_subscribers: int = Field(default=100, ge=1)
    """Sockets per conversation; one more is closed with 1013."""

    ws_auth_timeout: float = Field(default=10.0, gt=0)
    """Seconds a socket without a key in its header or query has to send its auth frame."""

    webhook_batch_events: int = Field(default=100, ge=1)
    """Events per webhook request at most."""

    webhook_batch_ms: float = Field(default=250.0, ge=0)
    """How long a few events wait for more before they are sent (milliseconds)."""

    webhook_batch_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    """Body size a batch stops growing at (one event larger than this still goes, alone)."""

    webhook_retry_min: float = Field(default=1.0, gt=0)
    """First retry delay (seconds); it doubles on each failure, with jitter."""

    webhook_retry_max: float = Field(default=60.0, gt=0)
    """Longest retry delay (seconds); also the delay after a refusal (a 4xx)."""

    webhook_timeout: float = Field(default=30.0, gt=0)
    """Seconds a webhook request may take."""

    webhook_concurrency: int = Field(default=32, ge=1)
    """Webhook requests in flight at once, over all conversations (one per conversation)."""

    shutdown_flush: float = Field(default=4.0, ge=0)
    """Seconds the webhook may keep sending at shutdown."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DeliverySettings:
        env = os.environ if environ is None else environ
        values = {name: env[ENV_PREFIX + name.upper()] for name in cls.model_fields
                  if env.get(ENV_PREFIX + name.upper())}
        return cls.model_validate(values)


class Delivery:
    """Feeds sockets and the webhook from one ConversationService."""

    def __init__(self, config: Config, service: ConversationService,
                 settings: DeliverySettings | None = None, *,
                 client: WebhookClient | None = None, clock: Clock | None = None) -> None:
        self.service = service
        self.settings = s = settings or DeliverySettings()
        self.pubsub = PubSub(s.ws_max_subscribers, s.ws_queue_events, s.ws_queue_bytes)
        self.webhook: Webhook | None = None
        if client is None and config.webhook_url:
            api_key = config.webhook_api_key or config.session_api_keys[0]
            client = WebhookClient(config.webhook_url, api_key, config.webhook_secret,
                                   timeout=s.webhook_timeout, clock=clock,
                                   max_connections=s.webhook_concurrency)
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
        service.add_log_listener(self._on_log_opened)
        service.transient_listeners.append(self._on_transient)
        service.delete_listeners.append(self._on_deleted)

    # -- feeding -------------------------------------------------------------------------------

    def _on_log_opened(self, conv: Conversation, log: EventLog) -> None:
        conv_id = conv.id

        def publish(written: Sequence[tuple[Event, bytes]]) -> None:
            if self.pubsub.has_subscribers(conv_id):
                self.pubsub.publish(conv_id, [Frame.stored(e.id or "", line) for e, line in written])

        log.subscribe(publish)
        if self.webhook is not None:
            pusher = self.webhook.watch(conv_id, conv.directory, log, self._alive(conv))
            conv.record.webhook = pusher.status

    def _on_transient(self, conv: Conversation, event: Event) -> None:
        if self.pubsub.has_subscribers(conv.id):
            if conv.masker:  # transient events skip the log, so they are masked here
                event = type(event).model_validate(conv.masker.data(event.model_dump(mode="json")))
            self.pubsub.publish(conv.id, [Frame.transient(event)])

    def _on_deleted(self, conv: Conversation) -> None:
        if self.webhook is not None:
            self.webhook.forget(conv.id)

    def _alive(self, conv: Conversation):  # type: ignore[no-untyped-def]
        record_id = conv.record.id
        return lambda: self.service.get(record_id) is conv

    # -- start and stop --------------------------------------------------------------------------

    async def start(self) -> None:
        """Begin pushing what earlier runs left unacknowledged (in the background)."""
        if self.webhook is not None:
            self._scan = asyncio.create_task(self._resume(), name="webhook resume")

    async def _resume(self) -> None:
        """Open the logs of conversations the webhook is behind on; note the others' cursors.

        Only a cursor file and the tail of each log are read: logs that are caught up stay
        closed (start-up cost does not grow with history).
        """
        assert self.webhook is not None
        for conv in self.service:
            if conv.id in self.webhook.pushers:
                continue  # its log was opened meanwhile: it is being pushed already
            try:
                behind = await asyncio.to_thread(needs_push, conv.directory)
            except OSError as exc:
                logger.warning("cannot tell whether %s needs a webhook push: %s", conv.id, exc)
                behind = True
            if self.service.get(conv.record.id) is not conv or conv.id in self.webhook.pushers:
                continue
            if behind:
                try:
                    await conv.log()
                except Exception:
                    logger.exception("cannot open the log of %s to push it", conv.id)
            else:
                pusher = self.webhook.pusher(conv.id, conv.directory, self._alive(conv))
                conv.record.webhook = pusher.status

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
