"""Fanout: where a conversation's events go besides its log (delivery implements it).

The conversations call it and never import delivery: the composition root hands it in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from agent_server.log import EventLog, Listener
from agent_server.record import WebhookStatus
from events import Event


class Fanout(Protocol):
    """Where a conversation's events go besides its log (delivery implements it)."""

    def sinks(self, conversation_id: str) -> Sequence[Listener]:
        """Listeners of the log's durable writes (websocket subscribers)."""
        ...

    def attach(
        self, conversation_id: str, directory: Path, log: EventLog, closed: asyncio.Event
    ) -> None:
        """Called once the log is open (the webhook pusher reads from it)."""
        ...

    def publish_transient(self, conversation_id: str, event: Event) -> None: ...

    async def delivered(self, conversation_id: str) -> None:
        """Until the live subscribers' sockets carry what was published (bounded)."""
        ...

    def forget(self, conversation_id: str) -> None:
        """The conversation was deleted."""
        ...

    def status(self, conversation_id: str) -> WebhookStatus | None:
        """The webhook push of the conversation, when there is a webhook."""
        ...
