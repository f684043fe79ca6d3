"""The sandbox rows as the rest of the control plane finds them: by id, and by the session key
a sandbox's own requests carry (its webhook, its secrets, the LLM it is to call).

`SandboxService` owns one and keeps the moves; what only looks a sandbox up (the webhook's
sender, a sandbox-side route) asks here instead of the store, so the lookup, and what counts
as a sandbox that may still speak, is written once.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from control_plane.crypto import hash_key
from control_plane.models import SandboxReason, SandboxRow
from control_plane.store import Database
from control_plane.store import sandboxes as rows
from web.errors import Gone, Unauthorized


class SandboxRows:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def current(self, sandbox_id: str) -> SandboxRow:
        """The row as it is now; Gone when there is none."""
        row = await rows.get(self.db, sandbox_id)
        if row is None:
            raise Gone(f"sandbox {sandbox_id} is gone")
        return row

    async def get(self, sandbox_id: str) -> SandboxRow | None:
        return await rows.get(self.db, sandbox_id)

    async def get_in(self, conn: AsyncConnection, sandbox_id: str) -> SandboxRow | None:
        """Read inside the caller's transaction (a placement, under the user's lock)."""
        return await rows.get_in(conn, sandbox_id)

    async def conversations_in(
        self, conn: AsyncConnection, sandbox_id: str, *, recorded_only: bool = False
    ) -> int:
        """Its conversations, counted in the caller's transaction; `recorded_only`: those no
        start task made (the webhook recorded them)."""
        return await rows.conversations_in(conn, sandbox_id, recorded_only=recorded_only)

    async def retire_in(
        self, conn: AsyncConnection, sandbox_id: str, reason: SandboxReason, detail: str
    ) -> bool:
        """MISSING (its remains to clean up) in the caller's transaction, only when no
        conversation is in it any more (the caller holds the user's lock); whether it was."""
        return await rows.retire_in(conn, sandbox_id, reason, detail, self.db.now())

    async def by_status(self) -> dict[tuple[str, str], int]:
        """Every sandbox counted by (status, host): what the metrics show."""
        return await rows.by_status(self.db)

    async def conversation_count(self, sandbox_id: str) -> int:
        return await rows.conversation_count(self.db, sandbox_id)

    async def touch(
        self,
        conn: AsyncConnection,
        sandbox_id: str,
        *,
        moment: datetime | None = None,
        only_running: bool = False,
    ) -> None:
        """Activity (the user's or the agent's), in the caller's transaction: what the idle
        time counts from and 'least recently used' orders by; never moved back."""
        await rows.touch(conn, sandbox_id, moment or self.db.now(), only_running=only_running)

    async def by_session_key(self, key: str, *, live: bool = True) -> SandboxRow:
        """The sandbox whose session key this is; Unauthorized for an unknown key, and with
        `live` for an ERROR or MISSING sandbox's (a webhook's late batch from a sandbox that
        has ended is still its own: `live` False)."""
        row = await rows.by_key_hash(self.db, hash_key(key))
        if row is None or (live and row.status.terminal):
            raise Unauthorized("unknown session key")
        return row
