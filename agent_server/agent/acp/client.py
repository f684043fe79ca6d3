"""The client side of ACP for one conversation: what an ACP agent may ask of us.

Files are read and written inside the working directory only (`core.paths.confine`, symlinks
resolved) with the limits and the atomic write of our own file tools (`tools.files`);
terminals are `Terminals`; what the agent reports (session updates) and asks (permissions)
goes to the session, through `Reports`. A side question's session (ask_agent) changes
nothing: it may read files, not write them nor run commands.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Protocol

from acp import RequestError
from acp.interfaces import Agent
from acp.schema import (
    AgentMessageChunk,
    AgentPlanContentUpdate,
    AgentPlanRemovedUpdate,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AvailableCommandsUpdate,
    ConfigOptionUpdate,
    CreateElicitationResponse,
    CreateTerminalResponse,
    CurrentModeUpdate,
    ElicitationMode,
    EnvVariable,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    SessionInfoUpdate,
    TerminalOutputResponse,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    UserMessageChunk,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from agent_server.agent.acp.terminals import Terminals
from tools import files

logger = logging.getLogger(__name__)

SessionUpdate = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStart
    | ToolCallProgress
    | AgentPlanUpdate
    | AgentPlanContentUpdate
    | AgentPlanRemovedUpdate
    | AvailableCommandsUpdate
    | CurrentModeUpdate
    | ConfigOptionUpdate
    | SessionInfoUpdate
    | UsageUpdate
)


class Reports(Protocol):
    """Where the client hands what the agent reports and asks (the session)."""

    def check(self, session_id: str) -> bool:
        """Raise RequestError unless this is one of the conversation's ACP sessions; True
        for a side question's."""
        ...

    async def on_update(self, session_id: str, update: SessionUpdate) -> None: ...

    async def on_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse: ...


class WorkspaceClient:
    """Implements `acp.Client` for one conversation's agent."""

    def __init__(self, root: Path, reports: Reports, terminals: Terminals) -> None:
        self.root = root
        self.reports = reports
        self.terminals = terminals

    # -- what the agent reports and asks -----------------------------------------------------

    async def session_update(self, session_id: str, update: SessionUpdate, **kwargs: Any) -> None:
        self.reports.check(session_id)
        await self.reports.on_update(session_id, update)

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        self.reports.check(session_id)
        return await self.reports.on_permission(session_id, tool_call, options)

    # -- files -----------------------------------------------------------------------------

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        self.reports.check(session_id)
        text = await asyncio.to_thread(self._read, path, line, limit)
        return ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse | None:
        self._changes(session_id)
        await asyncio.to_thread(self._write, path, content)
        return WriteTextFileResponse()

    def _changes(self, session_id: str) -> None:
        if self.reports.check(session_id):
            raise RequestError.invalid_request(
                {
                    "details": "a side question (ask_agent) changes nothing: no file writes, "
                    "no commands"
                }
            )

    def _read(self, raw: str, line: int | None, limit: int | None) -> str:
        try:
            path = files.confined(self.root, raw)
            if not path.exists():
                raise RequestError.resource_not_found(raw)
            text = files.decode(
                files.read_bytes(path, root=self.root, tool="fs/read_text_file"),
                path,
                "fs/read_text_file",
            )
        except files.Refusal as refusal:
            raise RequestError.invalid_params({"details": str(refusal)}) from None
        if line is None and limit is None:
            return text
        lines = text.splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        return "".join(lines[start : None if limit is None else start + max(limit, 0)])

    def _write(self, raw: str, content: str) -> None:
        try:
            path = files.confined(self.root, raw)
            if path.is_dir():
                raise files.Refusal(f"{path} is a directory; give a file path.")
            files.check_size(content, path, "fs/write_text_file")
            files.make_parents(path, self.root)
            files.write_text(path, content, root=self.root)
        except files.Refusal as refusal:
            raise RequestError.invalid_params({"details": str(refusal)}) from None
        except OSError as exc:
            raise RequestError.internal_error(
                {"details": f"cannot write {raw}: {exc.strerror or exc}"}
            ) from None

    # -- terminals -------------------------------------------------------------------------

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        self._changes(session_id)
        terminal_id = await self.terminals.create(command, args, env, cwd, output_byte_limit)
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        self.reports.check(session_id)
        terminal = self.terminals.get(terminal_id)
        return TerminalOutputResponse(
            output=terminal.text(), truncated=terminal.truncated, exit_status=terminal.exit_status()
        )

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        self.reports.check(session_id)
        status = (await self.terminals.wait(terminal_id)).exit_status()
        assert status is not None
        return WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> KillTerminalResponse | None:
        self._changes(session_id)
        await self.terminals.kill(terminal_id)
        return KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse | None:
        self._changes(session_id)
        await self.terminals.release(terminal_id)
        return ReleaseTerminalResponse()

    # -- what we do not offer --------------------------------------------------------------

    async def create_elicitation(
        self, message: str, mode: ElicitationMode, **kwargs: Any
    ) -> CreateElicitationResponse:
        raise RequestError.method_not_found("elicitation/create")

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        return None

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Agent) -> None:
        return None
