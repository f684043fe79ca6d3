"""A scripted editor: the ACP package's client side driving `agent-server acp` over stdio.

    async with editor_process(env, cwd) as editor:
        await editor.conn.initialize(protocol_version=1, client_capabilities=...)
        new = await editor.conn.new_session(cwd=str(cwd), mcp_servers=[])
        editor.answers.append("allow")                    # the next permission request's answer
        reply = await editor.conn.prompt(session_id=new.session_id, prompt=[text_block("hi")])
        editor.tool_calls(new.session_id)                 # what the editor would show

It records every session update, permission request and file write, answers permission
requests from `answers` (an option id, or "cancel"; with none queued the request waits until
one is), writes files only under its root, and keeps every raw frame the bridge sent, so a
test can look for what must never be there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import acp
from acp import RequestError
from acp.client.connection import ClientSideConnection
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    PermissionOption,
    ReadTextFileResponse,
    RequestPermissionResponse,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UserMessageChunk,
    WriteTextFileResponse,
)

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ToolCall:
    """A tool call as the editor shows it: its start, then every update merged in."""

    tool_call_id: str
    title: str
    kind: str | None
    statuses: list[str] = field(default_factory=list)
    content: list[Any] = field(default_factory=list)
    raw_input: Any = None
    raw_output: Any = None

    @property
    def status(self) -> str | None:
        return self.statuses[-1] if self.statuses else None

    def texts(self) -> str:
        return "\n".join(
            c.content.text
            for c in self.content
            if c.type == "content" and isinstance(c.content, TextContentBlock)
        )

    def diffs(self) -> list[Any]:
        return [c for c in self.content if c.type == "diff"]


class ScriptedEditor:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.updates: list[tuple[str, Any]] = []
        self.permissions: list[tuple[str, ToolCallUpdate, list[PermissionOption]]] = []
        self.writes: list[tuple[str, str]] = []
        self.answers: list[str] = []
        self.frames: list[dict[str, Any]] = []
        self.changed = asyncio.Condition()
        self.conn: ClientSideConnection

    # -- what a test reads -----------------------------------------------------------------

    async def wait(self, predicate: Callable[[], Any], timeout: float = 60, what: str = "") -> Any:
        """Until predicate() is truthy (checked at each thing the bridge sends)."""

        async def check() -> Any:
            async with self.changed:
                while not (value := predicate()):
                    await self.changed.wait()
                return value

        try:
            return await asyncio.wait_for(check(), timeout)
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what or predicate}") from None

    def of(self, session_id: str) -> list[Any]:
        return [u for s, u in self.updates if s == session_id]

    def _texts(self, session_id: str, kind: type) -> str:
        return "".join(
            u.content.text
            for u in self.of(session_id)
            if isinstance(u, kind) and isinstance(u.content, TextContentBlock)
        )

    def text(self, session_id: str) -> str:
        return self._texts(session_id, AgentMessageChunk)

    def thoughts(self, session_id: str) -> str:
        return self._texts(session_id, AgentThoughtChunk)

    def user_text(self, session_id: str) -> str:
        return self._texts(session_id, UserMessageChunk)

    def plans(self, session_id: str) -> list[AgentPlanUpdate]:
        return [u for u in self.of(session_id) if isinstance(u, AgentPlanUpdate)]

    def tool_calls(self, session_id: str) -> dict[str, ToolCall]:
        calls: dict[str, ToolCall] = {}
        for update in self.of(session_id):
            if isinstance(update, ToolCallStart):
                call = calls[update.tool_call_id] = ToolCall(
                    update.tool_call_id, update.title, update.kind
                )
                call.raw_input = update.raw_input
            elif isinstance(update, ToolCallProgress):
                call = calls.setdefault(
                    update.tool_call_id, ToolCall(update.tool_call_id, "?", None)
                )
                call.title = update.title or call.title
                call.raw_output = update.raw_output or call.raw_output
            else:
                continue
            if update.status:
                call.statuses.append(update.status)
            if update.content:
                call.content = list(update.content)
        return calls

    def sent(self) -> str:
        """Every frame the bridge wrote, as text."""
        return "\n".join(json.dumps(f) for f in self.frames)

    # -- acp.Client ------------------------------------------------------------------------

    async def _changed(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        await self._changed()

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        self.permissions.append((session_id, tool_call, options))
        await self._changed()
        answer = await self.wait(lambda: self.answers, what="an answer to queue")
        choice = answer.pop(0)
        if choice == "cancel":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=choice)
        )

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        target = Path(path)
        if not target.is_absolute() or not target.resolve().is_relative_to(self.root.resolve()):
            raise RequestError.invalid_params({"details": f"{path} is outside the project"})
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        self.writes.append((path, content))
        await self._changed()
        return WriteTextFileResponse()

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        return ReadTextFileResponse(content=Path(path).read_text())

    async def create_terminal(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/create")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Any) -> None:
        return None

    def observe(self, event: StreamEvent) -> None:
        if event.direction is StreamDirection.INCOMING:
            self.frames.append(event.message)
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().create_task(self._changed())


CAPABILITIES = ClientCapabilities(
    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True)
)


@contextlib.asynccontextmanager
async def editor_process(
    env: dict[str, str], cwd: Path, *args: str, log: Path | None = None
) -> AsyncIterator[ScriptedEditor]:
    """`python -m cli acp` (the `agent-server acp` command) spawned with `env` (over a clean
    environment), in `cwd`; its stderr to `log` (else cwd's parent / bridge.log)."""
    editor = ScriptedEditor(cwd)
    log_path = log or cwd.parent / "bridge.log"
    base = {
        k: v
        for k, v in os.environ.items()
        if k in ("PATH", "HOME", "LANG", "TMPDIR", "SSL_CERT_FILE", "NO_PROXY", "no_proxy")
    }
    with open(log_path, "ab") as stderr:
        async with acp.spawn_agent_process(
            editor,
            sys.executable,
            "-m",
            "cli",
            "acp",
            *args,
            env={**base, "PYTHONPATH": str(ROOT), **env},
            cwd=cwd,
            transport_kwargs={"stderr": stderr.fileno()},
            observers=[editor.observe],
        ) as (conn, process):
            editor.conn = conn
            editor.process = process  # type: ignore[attr-defined]
            yield editor


async def start(editor: ScriptedEditor, capabilities: ClientCapabilities = CAPABILITIES) -> Any:
    return await editor.conn.initialize(
        protocol_version=acp.PROTOCOL_VERSION, client_capabilities=capabilities
    )


def text(value: str) -> list[TextContentBlock]:
    return [acp.text_block(value)]
