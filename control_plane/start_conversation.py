"""A start's conversation, asked of its sandbox's agent server: the commit author, the creation
request, and the wait for the selected repository's clone.

The start task (`start_tasks`) asks as soon as the sandbox's server answers: a start of this
process tells it before its RUNNING write (`Starts.wait_serving`), so the conversation is
created while that write is made, and READY still waits for RUNNING (`created`). What the
server is sent is `create_request`'s: the LLM gateway and the sandbox's own token, never the
user's key or base URL.
"""

from __future__ import annotations

import asyncio

from control_plane.agent_client import AgentClient, Target
from control_plane.create_request import create_request
from control_plane.crypto import Cipher
from control_plane.gateway import credentials
from control_plane.models import SandboxRow
from control_plane.placement import Placement
from control_plane.sandboxes.service import SandboxService
from control_plane.settings import UserSettings
from control_plane.start_request import StartRequest
from control_plane.store import Database, conversations

#: Seconds a start task waits for the selected repository to be cloned.
CLONE_TIMEOUT = 600.0


class StartFailed(Exception):
    """Ends a task in ERROR; the message is the task's detail."""


class ConversationStarts:
    """The agent-server side of the starts: one per control plane."""

    def __init__(
        self,
        db: Database,
        cipher: Cipher,
        sandboxes_: SandboxService,
        agents: AgentClient,
        *,
        repository_url_template: str,
    ) -> None:
        self.db, self.cipher, self.sandboxes, self.agents = db, cipher, sandboxes_, agents
        self.repository_url_template = repository_url_template

    async def created(
        self, row: SandboxRow, placement: Placement, request: StartRequest, user: UserSettings
    ) -> Target:
        """The conversation created in the sandbox whose server answers as `row` says
        (`Starts.wait_serving`), returned once that sandbox is also RUNNING: its RUNNING write
        is made meanwhile. A creation that fails because the sandbox did (deleted, or its
        start not stored) fails with the sandbox's reason, which says more."""
        running = asyncio.create_task(self.sandboxes.starts.wait_running(row.id))
        try:
            target = await self._create(row, placement, request, user)
        except asyncio.CancelledError:
            running.cancel()
            raise
        except Exception:
            await asyncio.wait([running])
            if not running.cancelled() and (failed := running.exception()) is not None:
                raise failed from None
            raise
        await running
        return target

    async def _create(
        self, row: SandboxRow, placement: Placement, request: StartRequest, user: UserSettings
    ) -> Target:
        """The conversation asked of the sandbox's agent server: that server."""
        target = self.sandboxes.target(row)
        assert target is not None
        await self._configure_git(target, user)
        conversation = await conversations.get(self.db, placement.conversation_id)
        if conversation is None:
            raise StartFailed("the conversation was deleted while it started")
        gateway = credentials.access(self.sandboxes.control_plane_url, self.cipher, row)
        body = create_request(
            placement.conversation_id,
            conversation.working_dir,
            request,
            user,
            gateway=gateway,
            repository_url_template=self.repository_url_template,
        )
        await self.agents.create_conversation(target, body.body())
        return target

    async def _configure_git(self, target: Target, user: UserSettings) -> None:
        """Commit authorship is separate from any push credential (SPEC 5 rule 5)."""
        author = {
            k: v
            for k, v in (
                ("git_user_name", user.git_user_name),
                ("git_user_email", user.git_user_email),
            )
            if v
        }
        if author:
            await self.agents.patch_settings(target, author)

    async def wait_clone(self, target: Target, conversation_id: str, repository: str) -> None:
        """Until the agent server has cloned `repository`; StartFailed with git's reason (the
        conversation deleted) when it could not, or after CLONE_TIMEOUT."""
        deadline = asyncio.get_running_loop().time() + CLONE_TIMEOUT
        while asyncio.get_running_loop().time() < deadline:
            info = await self.agents.get_conversation(target, conversation_id)
            if info.get("repository_status") == "cloned":
                return
            if info.get("repository_status") == "failed":
                why = await self.agents.last_error(target, conversation_id)
                await self.agents.delete_conversation(target, conversation_id)
                raise StartFailed(
                    f"{repository} could not be cloned (is the name right, and is "
                    "a credential needed?); the conversation was not started"
                    + (f". {why}" if why else "")
                )
            await asyncio.sleep(0.05)
        raise StartFailed(f"cloning {repository} took more than {CLONE_TIMEOUT:g} s")
