"""Where a start goes: the sandbox that takes a new conversation, and the conversation's row.

A start is placed once, in one transaction with its user locked (`accounts.lock_user`): the
sandbox is read under the lock (an explicit one, or the one the user's grouping strategy
chooses among those with room, or a new row reserved by the sandbox service's starts), the
conversation's row is written with the working directory it will have there, and the caller
stores the task's placement in the same transaction. Two starts of one user therefore never
fill a sandbox past its cap, and a task placed meanwhile by another control plane keeps that
placement. A new sandbox is launched only once the transaction has committed, so a placement
that failed leaves nothing running; its lease is taken in that transaction, so its start holds
it from the moment the row exists.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncConnection

from control_plane import grouping
from control_plane.leases import SANDBOX
from control_plane.models import SandboxRow, TaskRow, ensure_usable
from control_plane.sandboxes.service import SandboxService
from control_plane.settings import UserSettings
from control_plane.start_request import StartRequest
from control_plane.store import Database, accounts, conversations, tasks
from web.errors import LimitReached, NotFound


@dataclass(frozen=True)
class Placement:
    sandbox_id: str
    conversation_id: str
    new_sandbox: bool


#: Stores a task's placement inside the placing transaction (the start task's WORKING stage,
#: written only while its process holds the task).
Record = Callable[[AsyncConnection, Placement], Awaitable[None]]


class Placer:
    """Places start tasks (a start task's walk asks it once, or reads a placement stored
    before a takeover)."""

    def __init__(self, db: Database, sandboxes: SandboxService, *, cap: int, spec_id: str) -> None:
        self.db = db
        self.sandboxes = sandboxes
        self.cap = cap
        self.spec_id = spec_id

    async def place(
        self, task: TaskRow, request: StartRequest, user: UserSettings, record: Record
    ) -> Placement:
        conversation_id = str(uuid.uuid4())
        async with self.db.begin() as conn:
            await accounts.lock_user(conn, task.user_id)
            placed = await tasks.get_in(conn, task.id)  # placed meanwhile: that placement holds
            if placed is not None and placed.app_conversation_id and placed.sandbox_id:
                return Placement(placed.sandbox_id, placed.app_conversation_id, placed.made_sandbox)
            # The sandbox is read under the user's lock (an explicit one again, though the
            # submission checked it): only what is read under the lock holds until the
            # placement commits.
            found: SandboxRow | None = None
            if request.sandbox_id is not None:
                found = await self._explicit(conn, task.user_id, request.sandbox_id)
            else:
                available = await grouping.candidates(conn, task.user_id, self.spec_id, self.cap)
                chosen = grouping.choose(user.grouping_strategy, available)
                found = None if chosen is None else await self.sandboxes.rows.get_in(conn, chosen)
            new_sandbox, leased = found is None, False
            if found is None:
                sandbox = await self.sandboxes.starts.new_row(
                    conn, task.user_id, self.spec_id, user.network_policy
                )
                # Its start's lease with it: no moment when it is there unheld, one write fewer.
                leased = await self.sandboxes.leases.claim_in(conn, SANDBOX, sandbox.id)
            else:
                sandbox = found
            working_dir = Path(self.sandboxes.working_dir(sandbox)) / conversation_id
            await conversations.insert(
                conn,
                self.db.now(),
                id=conversation_id,
                user_id=task.user_id,
                sandbox_id=sandbox.id,
                start_task_id=task.id,
                title=request.title,
                selected_repository=request.selected_repository,
                selected_branch=request.selected_branch,
                working_dir=str(working_dir),
                llm_model=request.llm_model or user.llm_model,
                trigger=request.trigger or "openhands_api",
                pr_number=request.pr_number,
                git_provider=request.git_provider,
                public=request.public,
                observability={
                    "span_name": request.observability_span_name,
                    "tags": request.observability_tags,
                    "metadata": request.observability_metadata,
                },
            )
            placement = Placement(sandbox.id, conversation_id, new_sandbox)
            await record(conn, placement)
        if new_sandbox:
            self.sandboxes.starts.launch(sandbox, fresh=True, leased=leased)
        return placement

    async def _explicit(self, conn: AsyncConnection, user_id: str, sandbox_id: str) -> SandboxRow:
        """An explicit sandbox_id overrides grouping: it must be the user's and usable."""
        row = await self.sandboxes.rows.get_in(conn, sandbox_id)
        if row is None or row.user_id != user_id:
            raise NotFound(f"sandbox {sandbox_id} not found")
        ensure_usable(row.id, row.status, "conversations cannot be started in it")
        # Counted under the lock.
        if await self.sandboxes.rows.conversations_in(conn, row.id) >= self.cap:
            raise LimitReached(
                f"sandbox {row.id} holds {self.cap} conversations, its most: "
                "start this one in another sandbox"
            )
        return row
