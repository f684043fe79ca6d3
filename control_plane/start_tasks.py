"""Start tasks: a conversation start answered at once and carried out in the background.

Stages are stored as they are reached (WORKING, WAITING_FOR_SANDBOX, STARTING_CONVERSATION,
PREPARING_REPOSITORY, then READY or ERROR with a detail). The agent server clones the selected
repository before the first step of a run, or at once when the conversation does not run yet;
either way the task waits in PREPARING_REPOSITORY for the clone: a repository that cannot be
cloned ends the task in ERROR, with git's own reason (masked), instead of leaving the agent in
an empty directory. Placement and the conversation row are written in one transaction with the
user locked (`placement`). Every step after it is idempotent (the agent-server conversation
is created under the id chosen at placement), so a control plane that restarts simply runs
unfinished tasks again; a task that cannot go on ends ERROR with the reason, never stuck. For
the same reason a task whose database work failed in a way that passes (`store.db.transient`:
the file locked, the disk full, the server away) is simply taken up again from its stored stage,
a few times here, then by the reconciler's next rounds (`take_over`), until the database is
back: it ends READY, or ERROR with a detail in words, never with the driver's SQL in it.

With several control planes on one database, a task is worked on by the one holding its lease
(`leases`): taken when it is submitted, renewed while the work goes on, taken over by another
process (`take_over`, each reconciler round) once its holder died and the lease expired. Every
stored stage is written only while the lease is held, the placement in the same transaction, so
a task ends READY or ERROR exactly once and is never placed twice.

The walk is this module's; what it hands on is built elsewhere: the start is placed by
`placement` (the sandbox and the conversation's row, under the user's lock), the sandbox is
started and waited for by the sandbox service's starts (`sandboxes.starts`), the conversation
is asked of the agent server by `start_conversation` (the moment that server answers, while its
RUNNING is stored), with the body `create_request` builds, and what a client is shown
of the start's secrets (its request again, a failure's detail) is `start_secrets`'.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from control_plane.agent_client import AgentClient, AgentError
from control_plane.crypto import Cipher
from control_plane.leases import TASK, Leases
from control_plane.models import (
    SandboxReason,
    SandboxStatus,
    StartTaskStatus,
    TaskRow,
    ensure_usable,
)
from control_plane.placement import Placement, Placer
from control_plane.sandboxes.service import SandboxService
from control_plane.settings import SettingsService
from control_plane.start_conversation import ConversationStarts, StartFailed
from control_plane.start_follow import Followers
from control_plane.start_request import StartRequest
from control_plane.start_secrets import masked, shown
from control_plane.store import Database, accounts, conversations, tasks
from control_plane.store import leases as lease_rows
from control_plane.store.db import RETRY_PAUSES, describe, transient
from control_plane.store.tasks import LeaseLost
from control_plane.telemetry import Telemetry
from control_plane.telemetry.stages import Stages
from web.errors import ServiceError

logger = logging.getLogger(__name__)


class StartTaskService:
    """The start tasks: stored when a start is asked for, walked to READY or ERROR in a job of
    this process while it holds the task's lease, and read back for the routes."""

    def __init__(
        self,
        db: Database,
        cipher: Cipher,
        sandboxes_: SandboxService,
        settings: SettingsService,
        agents: AgentClient,
        leases: Leases,
        *,
        cap: int,
        repository_url_template: str,
        spec_id: str,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.db = db
        self.telemetry = telemetry or Telemetry.build()
        self.leases = leases
        self.cipher = cipher
        self.sandboxes = sandboxes_
        self.settings = settings
        self.cap = cap
        self.spec_id = spec_id
        self.conversation = ConversationStarts(
            db, cipher, sandboxes_, agents, repository_url_template=repository_url_template
        )
        self.placer = Placer(db, sandboxes_, cap=cap, spec_id=spec_id)
        self._running: dict[str, asyncio.Task[None]] = {}
        self._stages: dict[str, Stages] = {}
        self.followers = Followers(db)

    async def submit(self, user_id: str, request: StartRequest) -> TaskRow:
        """Store the task (its request encrypted: it holds secrets) and start working on it.

        An explicit sandbox that is not the user's, or not usable, is refused now (404, 409,
        410) rather than as a failed task."""
        if request.sandbox_id is not None:
            sandbox = await self.sandboxes.owned(request.sandbox_id, user_id)
            ensure_usable(sandbox.id, sandbox.status, "conversations cannot be started in it")
        request_enc = self.cipher.encrypt(request.model_dump_json())
        async with self.db.begin() as conn:  # the task and its lease, one write
            task = await tasks.insert(self.db, uuid.uuid4().hex, user_id, request_enc, conn)
            held = await self.leases.claim_in(conn, TASK, task.id)
        if held:
            self._spawn(task)
        return task

    async def queue(self) -> dict[str, int]:
        """The unfinished tasks by stage (every control plane's: the metrics show them)."""
        return await tasks.unfinished_by_stage(self.db)

    async def owned_many(self, ids: list[str], user_id: str) -> dict[str, TaskRow]:
        """The user's tasks among `ids` (others, and unknown ids, are left out)."""
        return await tasks.get_many(self.db, ids, user_id)

    async def search(
        self,
        user_id: str,
        *,
        created_at_gte: datetime | None,
        conversation_id: str | None,
        order: str,
        limit: int,
        offset: int,
    ) -> tuple[list[TaskRow], bool]:
        """A page of the user's tasks, and whether more follow it."""
        found = await tasks.search(
            self.db,
            user_id,
            created_at_gte=created_at_gte,
            conversation_id=conversation_id,
            order=order,
            limit=limit + 1,
            offset=offset,
        )
        return found[:limit], len(found) > limit

    async def count(
        self, user_id: str, *, created_at_gte: datetime | None, conversation_id: str | None
    ) -> int:
        return await tasks.count(
            self.db, user_id, created_at_gte=created_at_gte, conversation_id=conversation_id
        )

    def request_of(self, task: TaskRow) -> dict[str, Any]:
        """The task's start request as a client may see it again: secret values, and the
        values of plugins' environments and headers (keys, often), masked (`start_secrets`)."""
        return shown(StartRequest.model_validate_json(self.cipher.decrypt(task.request_enc)))

    def follow(self, task: TaskRow, seconds: float) -> AsyncIterator[TaskRow]:
        """The task each time its stage (or detail) changes after `task`, until it is finished
        or `seconds` have passed (`start_follow`)."""
        return self.followers.follow(task, seconds)

    async def initial_text(self, task_id: str | None, user_id: str) -> str | None:
        """The text of a start's initial message (None: no such start, or it had none)."""
        task = (await tasks.get_many(self.db, [task_id], user_id)).get(task_id) if task_id else None
        if task is None:
            return None
        request = StartRequest.model_validate_json(self.cipher.decrypt(task.request_enc))
        if request.initial_message is None:
            return None
        return "\n".join(item.text for item in request.initial_message.content)

    async def agent_server_url(self, task: TaskRow) -> str | None:
        """The agent server of a READY task's sandbox while it runs (the app server's field)."""
        if task.status is not StartTaskStatus.READY or task.sandbox_id is None:
            return None
        row = await self.sandboxes.rows.get(task.sandbox_id)
        if row is None or row.status is not SandboxStatus.RUNNING:
            return None
        return self.sandboxes.url(row)

    def _spawn(self, task: TaskRow) -> None:
        if task.id in self._running:  # submitted and taken over at the same moment: once
            return
        job = asyncio.create_task(self._run(task), name=f"start task {task.id}")
        self._running[task.id] = job
        job.add_done_callback(lambda _: self._running.pop(task.id, None))

    async def take_over(self) -> int:
        """Carry on the unfinished tasks nobody works on (after a restart, or when another
        control plane died holding them); how many were taken. The expired leases a dead
        holder left on tasks it had finished are removed on the way."""
        await tasks.sweep_leases(self.db)
        taken = 0
        for found in await tasks.orphans(self.db, self.leases.holder):
            if found.id in self._running or not await self.leases.claim(TASK, found.id):
                continue
            # Read again once held: this process's own job may have finished it (READY) and
            # let it go while we looked, and working it again would fail it and remove the
            # conversation it had just started.
            if found.id in self._running:
                continue
            task = await tasks.get(self.db, found.id)
            if task is None or task.status.finished:
                await self.leases.release(TASK, found.id)
                continue
            logger.info("taking over start task %s at %s", task.id, task.status.value)
            self._spawn(task)
            taken += 1
        return taken

    async def _stage(
        self,
        task: TaskRow,
        status: StartTaskStatus,
        detail: str | None = None,
        conn: AsyncConnection | None = None,
        **values: Any,
    ) -> TaskRow | None:
        """Store a stage while this process holds the task (LeaseLost otherwise): the row."""
        stored = await self._store(task, status, detail, conn, **values)
        self._enter(task, status)
        return stored

    async def _store(
        self,
        task: TaskRow,
        status: StartTaskStatus,
        detail: str | None = None,
        conn: AsyncConnection | None = None,
        **values: Any,
    ) -> TaskRow | None:
        stored = await tasks.set_status(
            self.db, task.id, status, detail, holder=self.leases.holder, conn=conn, **values
        )
        if conn is None:  # else once its transaction is committed (`_ended`)
            self.followers.ring(task.id, stored)
        return stored

    def _enter(self, task: TaskRow, status: StartTaskStatus) -> None:
        """The stage's span begins (in the task's own job: spans are its context's)."""
        stages = self._stages.get(task.id)
        if stages is not None and not status.finished:
            stages.enter(status.value)

    async def _run(self, task: TaskRow) -> None:
        """The task's work, tried again while the database fails in a way that passes; no
        failure leaves this job unhandled (a background task's error would be lost). One span
        holds it (`start_task`), a span per stage under it (`telemetry.stages`)."""
        stages = self._stages[task.id] = Stages(self.telemetry, task.created_at)
        try:
            with self.telemetry.span("start_task", {"control_plane.start_task.id": task.id}):
                stages.enter(task.status.value)
                try:
                    await self._attempts(task)
                finally:
                    stages.close()
        except LeaseLost:
            logger.warning("start task %s was taken over by another control plane", task.id)
        except Exception:
            logger.exception("start task %s failed", task.id)
        finally:  # stopped or done: another process may carry it on at once
            self._stages.pop(task.id, None)
            try:
                await self.leases.release(TASK, task.id)
            except Exception:  # the database away: the lease simply expires
                logger.warning("releasing the lease of start task %s failed", task.id)

    async def _attempts(self, task: TaskRow) -> None:
        for pause in (*RETRY_PAUSES, None):  # then the reconciler's rounds
            try:
                await self._work(task)
                return
            except SQLAlchemyError as exc:
                logger.warning(
                    "start task %s: storage failed (%s); %s",
                    task.id,
                    describe(exc),
                    "left to the reconciler" if pause is None else "trying again",
                )
                if pause is None:
                    return
                await asyncio.sleep(pause)

    async def _work(self, task: TaskRow) -> None:
        placement: Placement | None = None
        secrets: list[str] = []  # what a sandbox's answer may quote: never into a detail
        try:
            request = StartRequest.model_validate_json(self.cipher.decrypt(task.request_enc))
            user = await self.settings.get(task.user_id)
            secrets = [*user.secrets.values(), *request.secrets.values(), user.llm_api_key or ""]
            if not (request.llm_model or user.llm_model):
                raise StartFailed(
                    "no LLM configured: PATCH /api/v1/settings with llm_model "
                    "(and llm_api_key, llm_base_url) first"
                )
            placed: list[Placement] = []  # stored by this placement (WAITING_FOR_SANDBOX with it)
            if task.app_conversation_id and task.sandbox_id:  # placed before a takeover
                placement = Placement(task.sandbox_id, task.app_conversation_id, task.made_sandbox)
            else:
                placement = await self.placer.place(
                    task, request, user, functools.partial(self._placed, task, placed)
                )
            if placed:
                self.followers.ring(task.id)
                self._enter(task, StartTaskStatus.WAITING_FOR_SANDBOX)
            else:
                await self._stage(task, StartTaskStatus.WAITING_FOR_SANDBOX)
            # Read again, not taken from the placement: held by no guard since, the sandbox may
            # have been paused (it is resumed) or deleted meanwhile. Its server answering is
            # enough to ask for the conversation (`created` waits for RUNNING too).
            row = await self.sandboxes.starts.wait_serving(placement.sandbox_id)
            # Stored while the conversation is asked for (its creation is idempotent), and
            # before whatever comes after it (READY, or ERROR).
            self._enter(task, StartTaskStatus.STARTING_CONVERSATION)
            storing = asyncio.create_task(self._store(task, StartTaskStatus.STARTING_CONVERSATION))
            try:
                target = await self.conversation.created(row, placement, request, user)
            except BaseException:
                with contextlib.suppress(Exception):  # the first failure is the one told
                    await storing
                raise
            await storing
            if request.selected_repository:
                await self._stage(task, StartTaskStatus.PREPARING_REPOSITORY)
                await self.conversation.wait_clone(
                    target, placement.conversation_id, request.selected_repository
                )
            async with self.db.begin() as conn:  # shown and READY together, or neither
                ready = await self._stage(task, StartTaskStatus.READY, conn=conn)
                await conversations.mark_started(conn, placement.conversation_id, self.db.now())
            self._ended(task, ready=ready)
        except (asyncio.CancelledError, LeaseLost):
            raise  # shutting down (resumed at the next start), or another has it now
        except SQLAlchemyError as exc:
            if transient(exc):
                raise  # taken up again (`_run`): every stage is idempotent
            logger.error("start task %s: storage failed: %s", task.id, describe(exc))
            await self._fail(
                task,
                placement,
                "the control plane could not store this start "
                f"({type(exc).__name__}); start the conversation again",
                reason="storage",
            )
        except (StartFailed, ServiceError, AgentError) as exc:
            await self._fail(
                task,
                placement,
                masked(str(exc) if not isinstance(exc, ServiceError) else exc.detail, secrets),
                reason=type(exc).__name__,
            )
        except Exception as exc:
            logger.exception("start task %s failed", task.id)
            await self._fail(
                task,
                placement,
                f"unexpected error ({type(exc).__name__}); see the control plane's log",
                reason="unexpected",
            )

    async def _placed(
        self, task: TaskRow, placed: list[Placement], conn: AsyncConnection, placement: Placement
    ) -> None:
        """Only while this process holds the task: a placement is made once, and the task
        waits for its sandbox from then (one write with it; its followers are rung and its
        span begun by the caller, once it is committed)."""
        await self._store(
            task,
            StartTaskStatus.WAITING_FOR_SANDBOX,
            conn=conn,
            app_conversation_id=placement.conversation_id,
            sandbox_id=placement.sandbox_id,
            made_sandbox=placement.new_sandbox,
        )
        placed.append(placement)

    async def _fail(
        self, task: TaskRow, placement: Placement | None, detail: str, *, reason: str
    ) -> None:
        """ERROR with the reason; the half-made conversation is removed, and the sandbox made
        for it (by whichever process placed the task: `made_sandbox` is stored with the
        placement) unless another conversation has been placed in it meanwhile."""
        logger.info("start task %s failed: %s", task.id, detail)
        owner = await lease_rows.holder_of(self.db, TASK, task.id)
        if owner is None or owner[0] != self.leases.holder:
            raise LeaseLost(f"start task {task.id} is another control plane's now")
        try:  # cleaned up first: a client that sees ERROR sees what is left, not a race
            if placement is None:
                return
            async with self.db.begin() as conn:
                # The user's lock: no placement takes the sandbox while it is being retired.
                await accounts.lock_user(conn, task.user_id)
                await conversations.remove(conn, placement.conversation_id)
                retired = placement.new_sandbox and await self.sandboxes.rows.retire_in(
                    conn,
                    placement.sandbox_id,
                    SandboxReason.START_FAILED,
                    "removed with the conversation start it was made for, which failed",
                )
            if retired:
                try:
                    await self.sandboxes.clean_up(placement.sandbox_id, due_only=False)
                except ServiceError as exc:  # busy for long: the reconciler cleans it up
                    logger.warning(
                        "sandbox %s is left to the reconciler: %s", placement.sandbox_id, exc.detail
                    )
        finally:
            await self._stage(task, StartTaskStatus.ERROR, detail[:2000])
            self._ended(task, reason)

    def _ended(
        self, task: TaskRow, reason: str | None = None, ready: TaskRow | None = None
    ) -> None:
        """READY (`reason` None: `ready` is its row, once committed) or ERROR for `reason`: a
        word from a fixed set (a class name of this code's errors, `storage`, `unexpected`),
        never the detail, as a label."""
        self.followers.ring(task.id, ready)
        stages = self._stages.get(task.id)
        if stages is not None:
            stages.end(self.db.now(), reason)

    async def close(self) -> None:
        for job in list(self._running.values()):
            job.cancel()
        if self._running:
            await asyncio.wait(list(self._running.values()), timeout=5)
