"""Start tasks: a conversation start answered at once and carried out in the background.

Stages are stored as they are reached (WORKING, WAITING_FOR_SANDBOX, STARTING_CONVERSATION,
PREPARING_REPOSITORY, then READY or ERROR with a detail). The agent server clones the selected
repository before the first step of a run, so with `initial_message.run` the task waits in
PREPARING_REPOSITORY for the clone: a repository that cannot be cloned ends the task in ERROR
instead of leaving the agent in an empty directory. Placement and the conversation row
are written in one transaction with the user locked (see `grouping`). Every step after it is
idempotent (the agent-server conversation is created under the id chosen at placement), so a
control plane that restarts simply runs unfinished tasks again; a task that cannot go on ends
ERROR with the reason, never stuck.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from control_plane import grouping
from control_plane.agent_client import AgentClient, AgentError, Target
from control_plane.crypto import Cipher
from control_plane.errors import ApiError, Conflict, NotFound
from control_plane.models import SandboxStatus, StartTaskStatus
from control_plane.sandboxes.service import SandboxService
from control_plane.settings import SettingsService, UserSettings
from control_plane.start_request import StartRequest
from control_plane.store import Database
from control_plane.store import accounts, conversations, sandboxes, tasks
from control_plane.store.tasks import TaskRow

logger = logging.getLogger(__name__)


#: Seconds a start task waits for the selected repository to be cloned.
CLONE_TIMEOUT = 600.0


class StartFailed(Exception):
    """Ends a task in ERROR; the message is the task's detail."""


@dataclass(frozen=True)
class Placement:
    sandbox_id: str
    conversation_id: str
    new_sandbox: bool


class StartTaskService:
    def __init__(self, db: Database, cipher: Cipher, sandboxes_: SandboxService,
                 settings: SettingsService, agents: AgentClient, *, cap: int,
                 repository_url_template: str, spec_id: str) -> None:
        self.db = db
        self.cipher = cipher
        self.sandboxes = sandboxes_
        self.settings = settings
        self.agents = agents
        self.cap = cap
        self.repository_url_template = repository_url_template
        self.spec_id = spec_id
        self._running: dict[str, asyncio.Task[None]] = {}

    async def submit(self, user_id: str, request: StartRequest) -> TaskRow:
        """Store the task (its request encrypted: it holds secrets) and start working on it."""
        task = await tasks.insert(self.db, uuid.uuid4().hex, user_id,
                                  self.cipher.encrypt(request.model_dump_json()))
        self._spawn(task)
        return task

    def _spawn(self, task: TaskRow) -> None:
        job = asyncio.create_task(self._run(task), name=f"start task {task.id}")
        self._running[task.id] = job
        job.add_done_callback(lambda _: self._running.pop(task.id, None))

    async def resume_unfinished(self) -> None:
        """After a restart: every task not READY or ERROR is carried on."""
        for task in await tasks.unfinished(self.db):
            logger.info("resuming start task %s from %s", task.id, task.status.value)
            self._spawn(task)

    async def _run(self, task: TaskRow) -> None:
        placement: Placement | None = None
        try:
            request = StartRequest.model_validate_json(self.cipher.decrypt(task.request_enc))
            user = await self.settings.get(task.user_id)
            if not user.llm_model:
                raise StartFailed("no LLM configured: PATCH /api/v1/settings with llm_model "
                                  "(and llm_api_key, llm_base_url) first")
            if task.app_conversation_id and task.sandbox_id:
                placement = Placement(task.sandbox_id, task.app_conversation_id, False)
            else:
                placement = await self._place(task, request, user)
            await tasks.set_status(self.db, task.id, StartTaskStatus.WAITING_FOR_SANDBOX)
            row = await self.sandboxes.wait_running(placement.sandbox_id)
            await tasks.set_status(self.db, task.id, StartTaskStatus.STARTING_CONVERSATION)
            url = self.sandboxes.url(row)
            assert url is not None
            target = Target(url, self.sandboxes.session_key(row))
            await self._configure_git(target, user)
            conversation = await conversations.get(self.db, placement.conversation_id)
            if conversation is None:
                raise StartFailed("the conversation was deleted while it started")
            await self.agents.create_conversation(
                target, self._creation_body(placement.conversation_id, conversation.working_dir,
                                            request, user))
            if request.selected_repository and request.initial_message and request.initial_message.run:
                await tasks.set_status(self.db, task.id, StartTaskStatus.PREPARING_REPOSITORY)
                await self._wait_clone(target, placement.conversation_id, request.selected_repository)
            await conversations.update_fields(self.db, placement.conversation_id, started=True)
            await tasks.set_status(self.db, task.id, StartTaskStatus.READY)
        except asyncio.CancelledError:
            raise  # shutting down: the task stays unfinished and is resumed at the next start
        except (StartFailed, ApiError, AgentError) as exc:
            await self._fail(task, placement, str(exc) if not isinstance(exc, ApiError) else exc.detail)
        except Exception as exc:
            logger.exception("start task %s failed", task.id)
            await self._fail(task, placement, f"unexpected error: {type(exc).__name__}: {exc}")

    async def _wait_clone(self, target: Target, conversation_id: str, repository: str) -> None:
        deadline = asyncio.get_running_loop().time() + CLONE_TIMEOUT
        while asyncio.get_running_loop().time() < deadline:
            info = await self.agents.get_conversation(target, conversation_id)
            if info.get("repository_status") == "cloned":
                return
            if info.get("repository_status") == "failed":
                await self.agents.delete_conversation(target, conversation_id)
                raise StartFailed(f"{repository} could not be cloned (is the name right, and is "
                                  "a credential needed?); the conversation was not started")
            await asyncio.sleep(0.05)
        raise StartFailed(f"cloning {repository} took more than {CLONE_TIMEOUT:g} s")

    async def _place(self, task: TaskRow, request: StartRequest, user: UserSettings) -> Placement:
        conversation_id = str(uuid.uuid4())
        async with self.db.begin() as conn:
            await accounts.lock_user(conn, task.user_id)
            sandbox_id: str | None
            if request.sandbox_id is not None:
                sandbox_id = await self._explicit(conn, task.user_id, request.sandbox_id)
            else:
                available = await grouping.candidates(conn, task.user_id, self.spec_id, self.cap)
                sandbox_id = grouping.choose(user.grouping_strategy, available)
            new_sandbox = sandbox_id is None
            if sandbox_id is None:
                sandbox = await self.sandboxes.new_row(conn, task.user_id, self.spec_id)
            else:
                found = await sandboxes.get_in(conn, sandbox_id)
                assert found is not None
                sandbox = found
            working_dir = Path(sandbox.root_dir) / "workspace" / conversation_id
            await conversations.insert(
                conn, id=conversation_id, user_id=task.user_id, sandbox_id=sandbox.id,
                start_task_id=task.id, title=request.title,
                selected_repository=request.selected_repository,
                selected_branch=request.selected_branch, working_dir=str(working_dir),
                observability={"span_name": request.observability_span_name,
                               "tags": request.observability_tags,
                               "metadata": request.observability_metadata})
            await tasks.set_status(conn, task.id, StartTaskStatus.WORKING,
                                   app_conversation_id=conversation_id, sandbox_id=sandbox.id)
        if new_sandbox:
            self.sandboxes.launch(sandbox)
        return Placement(sandbox.id, conversation_id, new_sandbox)

    async def _explicit(self, conn: Any, user_id: str, sandbox_id: str) -> str:
        """An explicit sandbox_id overrides grouping: it must be the user's and not ERROR/MISSING."""
        row = await sandboxes.get_in(conn, sandbox_id)
        if row is None or row.user_id != user_id:
            raise NotFound(f"sandbox {sandbox_id} not found")
        if row.status.terminal:
            raise Conflict(f"sandbox {sandbox_id} is {row.status.value}: conversations cannot "
                           "be started in it")
        return row.id

    async def _configure_git(self, target: Target, user: UserSettings) -> None:
        """Commit authorship is separate from any push credential (SPEC 5 rule 5)."""
        author = {k: v for k, v in (("git_user_name", user.git_user_name),
                                    ("git_user_email", user.git_user_email)) if v}
        if author:
            await self.agents.patch_settings(target, author)

    def _creation_body(self, conversation_id: str, working_dir: str, request: StartRequest,
                       user: UserSettings) -> dict[str, Any]:
        llm: dict[str, Any] = {"model": user.llm_model}
        if user.llm_api_key:
            llm["api_key"] = user.llm_api_key
        if user.llm_base_url:
            llm["base_url"] = user.llm_base_url
        if user.llm_stream:  # StreamingDeltaEvents on the sandbox's socket (`control_plane.deltas`)
            llm["stream"] = True
        agent: dict[str, Any] = {"llm": llm, "tools": [{"name": t} for t in user.default_tools]}
        if request.plugins:
            agent["mcp_config"] = {"mcpServers": {p.name: p.server() for p in request.plugins}}
        body: dict[str, Any] = {
            "conversation_id": conversation_id,
            "agent": agent,
            "workspace": {"working_dir": working_dir},
            # A conversation's own secret wins over a stored one of the same name (SPEC 5 rule 4).
            "secrets": {**user.secrets, **request.secrets},
            "observability_span_name": request.observability_span_name,
            "observability_tags": request.observability_tags,
            "observability_metadata": request.observability_metadata,
        }
        if request.title:
            body["title"] = request.title
        if request.initial_message is not None:
            body["initial_message"] = request.initial_message.model_dump()
        if request.selected_repository:
            repository: dict[str, Any] = {
                "url": self.repository_url_template.format(repository=request.selected_repository)}
            if request.selected_branch:
                repository["branch"] = request.selected_branch
            body["repository"] = repository
        return body

    async def _fail(self, task: TaskRow, placement: Placement | None, detail: str) -> None:
        """ERROR with the reason; the half-made conversation is removed, and a sandbox made for it."""
        logger.info("start task %s failed: %s", task.id, detail)
        try:  # cleaned up first: a client that sees ERROR sees what is left, not a race
            if placement is None:
                return
            async with self.db.begin() as conn:
                await conversations.remove(conn, placement.conversation_id)
            row = await sandboxes.get(self.db, placement.sandbox_id)
            if (row is not None and placement.new_sandbox
                    and row.status is not SandboxStatus.MISSING
                    and await sandboxes.conversation_count(self.db, row.id) == 0):
                await self.sandboxes.destroy(row)
        finally:
            await tasks.set_status(self.db, task.id, StartTaskStatus.ERROR, detail[:2000])

    async def close(self) -> None:
        for job in list(self._running.values()):
            job.cancel()
        if self._running:
            await asyncio.wait(list(self._running.values()), timeout=5)
