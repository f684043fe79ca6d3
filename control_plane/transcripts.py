"""Transcripts: a conversation's events as this control plane stored them from the webhook
(SPEC 4.1: events search and count, and the live stream). They are read from its own store, so
they stay after the sandbox is gone."""

from __future__ import annotations

from collections.abc import AsyncIterator

from control_plane.deltas import DeltaHub
from control_plane.models import EventFilters
from control_plane.relay import Bell, relay
from control_plane.store import Database, conversations, events
from web.errors import invalid


class Transcripts:
    def __init__(self, db: Database, bell: Bell, deltas: DeltaHub | None = None) -> None:
        self.db = db
        self.bell = bell
        self.deltas = deltas

    async def search(
        self,
        conversation_id: str,
        filters: EventFilters,
        *,
        descending: bool,
        limit: int,
        page: int | None,
    ) -> tuple[list[str], int | None]:
        """A page of stored events (each its JSON text, as stored) and where the next begins."""
        return await events.search(
            self.db, conversation_id, filters, descending=descending, limit=limit, page=page
        )

    async def count(self, conversation_id: str, filters: EventFilters) -> int:
        return await events.count(self.db, conversation_id, filters)

    async def position(self, conversation_id: str, event_id: str) -> int:
        """Where a stored event sits in the conversation's order; InvalidInput (located at the
        id) when no stored event of this conversation has this id."""
        found = await events.position(self.db, conversation_id, event_id)
        if found is None:
            raise invalid([], "no stored event of this conversation has this id", input_=event_id)
        return found

    def follow(self, conversation_id: str, after: int) -> AsyncIterator[bytes]:
        """The live stream (`relay`) from position `after`, until the conversation is deleted
        or the server stops."""

        async def still_there() -> bool:
            return await conversations.get(self.db, conversation_id) is not None

        return relay(self.db, self.bell, conversation_id, after, still_there, deltas=self.deltas)
