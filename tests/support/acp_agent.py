"""A scripted ACP agent for the tests, written with the protocol package's agent side.

Run as `python tests/support/acp_agent.py [--sessions FILE] [--fork]`. With `--sessions`, it
keeps each session's history in FILE (so a new process remembers it), offers loadSession and
replays a loaded session's history as the protocol says (user and agent message chunks, its
tool calls); without, it knows one session, "scripted-session", for the life of the process.
With `--fork` it offers the unstable session/fork (a copy of a session's history). Each line of
a prompt is one command:

    say TEXT             stream TEXT as three message chunks
    think TEXT           one thought chunk
    read PATH            a `read` tool call that reads PATH through the client
    write PATH TEXT      an `edit` tool call that asks permission, then writes PATH
    writes P1,P2 TEXT    `write` for each path at once (several permissions asked together)
    put PATH TEXT        write PATH through the client without asking; say what happened
    env NAME             an `execute` tool call whose input and output hold $NAME's value
    terminal COMMAND     an `execute` tool call that runs COMMAND in a client terminal
    spawn PIDFILE        start a grandchild (sleep) in a session of its own; its pid to PIDFILE
    sleep SECONDS        wait (a cancel ends the turn after it)
    usage IN OUT USD     a usage_update (the session's cost so far: USD) and the turn's usage
    stop REASON          end the turn now with this stop reason (max_tokens, refusal, ...)
    hang                 wait until cancelled (then the turn ends `cancelled`)
    hang-hard            wait for ever, cancel or not
    crash CODE           write to stderr (with $ACP_TEST_SECRET), then exit with CODE
    recall               say "I remember: " and the earlier prompts of this session, joined by |
    sessions             say how many sessions this process opened, loaded or forked
    quote WORD           say whether WORD is in this prompt's text on another line

After the last command the turn ends (`end_turn`).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import acp
from acp import PROTOCOL_VERSION
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    Cost,
    ForkSessionResponse,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    SessionCapabilities,
    SessionForkCapabilities,
    TextContentBlock,
    ToolCallUpdate,
    Usage,
    UsageUpdate,
)


class ScriptedAgent:
    def __init__(self, sessions: Path | None = None, fork: bool = False) -> None:
        self.conn: Client | None = None
        self.cancelled = asyncio.Event()
        self.calls = 0
        self.usage: Usage | None = None
        self.sessions = sessions
        self.fork = fork
        #: Each session's history: ["user", text] and ["agent", text] entries.
        self.history: dict[str, list[list[str]]] = {}
        self.opened = 0
        self.prompt_text = ""
        if sessions is not None and sessions.exists():
            self.history = json.loads(sessions.read_text())

    def _keep(self) -> None:
        if self.sessions is not None:
            self.sessions.write_text(json.dumps(self.history))

    def on_connect(self, conn: Client) -> None:
        self.conn = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        forks = SessionCapabilities(fork=SessionForkCapabilities()) if self.fork else None
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=self.sessions is not None, session_capabilities=forks
            ),
        )

    async def new_session(
        self, cwd: str, mcp_servers: Any = None, **kwargs: Any
    ) -> NewSessionResponse:
        self.cwd = cwd
        self.opened += 1
        if self.sessions is not None:
            sid = f"s-{uuid.uuid4().hex}"
        else:
            sid = "scripted-session" if self.opened == 1 else f"scripted-session-{self.opened}"
        self.history.setdefault(sid, [])
        self._keep()
        return NewSessionResponse(session_id=sid)

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: Any = None, **kwargs: Any
    ) -> LoadSessionResponse:
        if self.sessions is None or session_id not in self.history:
            raise acp.RequestError.resource_not_found(session_id)
        self.opened += 1
        for n, (role, text) in enumerate(self.history[session_id]):
            if role == "user":
                await self.client.session_update(session_id, acp.update_user_message_text(text))
            else:
                await self.client.session_update(session_id, acp.update_agent_message_text(text))
                await self.client.session_update(
                    session_id,
                    acp.start_tool_call(
                        f"replayed-{n}", "replayed call", kind="read", status="completed"
                    ),
                )
        return LoadSessionResponse()

    async def fork_session(
        self, cwd: str, session_id: str, mcp_servers: Any = None, **kwargs: Any
    ) -> ForkSessionResponse:
        if session_id not in self.history:
            raise acp.RequestError.resource_not_found(session_id)
        self.opened += 1
        sid = f"fork-{uuid.uuid4().hex}"
        self.history[sid] = [list(entry) for entry in self.history[session_id]]
        self._keep()
        return ForkSessionResponse(session_id=sid)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.set()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        self.cancelled.clear()
        self.usage = None
        text = "\n".join(b.text for b in prompt if isinstance(b, TextContentBlock))
        self.prompt_text = text
        self.history.setdefault(session_id, []).append(["user", text])
        self._keep()
        for line in text.splitlines():
            command, _, rest = line.strip().partition(" ")
            handler = getattr(self, "do_" + command.replace("-", "_"), None)
            if handler is None:
                continue
            result = await handler(session_id, rest)
            if result == "cancelled" or self.cancelled.is_set():
                return PromptResponse(stop_reason="cancelled")
            if isinstance(result, str) and result.startswith("stop:"):
                return PromptResponse(stop_reason=result[5:])
        return PromptResponse(stop_reason="end_turn", usage=self.usage)

    # -- commands ----------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        assert self.conn is not None
        return self.conn

    def call_id(self) -> str:
        self.calls += 1
        return f"call-{self.calls}"

    async def do_say(self, sid: str, text: str) -> None:
        self.history.setdefault(sid, []).append(["agent", text])
        self._keep()
        third = max(len(text) // 3, 1)
        for piece in (text[:third], text[third : 2 * third], text[2 * third :]):
            if piece:
                await self.client.session_update(sid, acp.update_agent_message_text(piece))
                await asyncio.sleep(0.01)

    async def do_think(self, sid: str, text: str) -> None:
        await self.client.session_update(sid, acp.update_agent_thought_text(text))

    async def do_read(self, sid: str, path: str) -> None:
        cid = self.call_id()
        await self.client.session_update(sid, acp.start_read_tool_call(cid, f"Read {path}", path))
        await self.client.session_update(sid, acp.update_tool_call(cid, status="in_progress"))
        try:
            got = await self.client.read_text_file(session_id=sid, path=path)
        except acp.RequestError as exc:
            await self.client.session_update(
                sid,
                acp.update_tool_call(
                    cid, status="failed", raw_output={"error": str(exc), "data": exc.data}
                ),
            )
            return
        await self.client.session_update(
            sid,
            acp.update_tool_call(
                cid,
                status="completed",
                raw_output={"content": got.content},
                content=[acp.tool_content(acp.text_block(got.content))],
            ),
        )

    async def do_write(self, sid: str, rest: str) -> str | None:
        path, _, content = rest.partition(" ")
        cid = self.call_id()
        await self.client.session_update(
            sid, acp.start_edit_tool_call(cid, f"Write {path}", path, content)
        )
        answer = await self.client.request_permission(
            session_id=sid,
            tool_call=ToolCallUpdate(tool_call_id=cid, title=f"Write {path}", kind="edit"),
            options=[
                PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
                PermissionOption(option_id="no", name="Reject", kind="reject_once"),
            ],
        )
        outcome = answer.outcome
        if outcome.outcome == "cancelled":
            await self.client.session_update(sid, acp.update_tool_call(cid, status="failed"))
            return "cancelled"
        if outcome.option_id != "yes":
            await self.client.session_update(
                sid, acp.update_tool_call(cid, status="failed", raw_output="rejected by the user")
            )
            return None
        await self.client.session_update(sid, acp.update_tool_call(cid, status="in_progress"))
        try:
            await self.client.write_text_file(session_id=sid, path=path, content=content)
        except acp.RequestError as exc:
            await self.client.session_update(
                sid,
                acp.update_tool_call(
                    cid, status="failed", raw_output={"error": str(exc), "data": exc.data}
                ),
            )
            return None
        await self.client.session_update(
            sid,
            acp.update_tool_call(
                cid, status="completed", content=[acp.tool_diff_content(path, content)]
            ),
        )
        return None

    async def do_put(self, sid: str, rest: str) -> None:
        path, _, content = rest.partition(" ")
        try:
            await self.client.write_text_file(session_id=sid, path=path, content=content)
        except acp.RequestError as exc:
            await self.do_say(sid, f"put refused: {exc.data}")
            return
        await self.do_say(sid, f"put {path}")

    async def do_writes(self, sid: str, rest: str) -> str | None:
        paths, _, content = rest.partition(" ")
        done = await asyncio.gather(
            *(self.do_write(sid, f"{path} {content}") for path in paths.split(","))
        )
        return "cancelled" if "cancelled" in done else None

    async def do_env(self, sid: str, name: str) -> None:
        cid = self.call_id()
        value = os.environ.get(name, "")
        await self.client.session_update(
            sid,
            acp.start_tool_call(
                cid,
                f"echo ${name}",
                kind="execute",
                status="in_progress",
                raw_input={"command": f"echo {value}"},
            ),
        )
        await self.client.session_update(
            sid,
            acp.update_tool_call(
                cid,
                status="completed",
                raw_output={"stdout": value},
                content=[acp.tool_content(acp.text_block(f"the value is {value}"))],
            ),
        )

    async def do_terminal(self, sid: str, command: str) -> None:
        cid = self.call_id()
        await self.client.session_update(
            sid,
            acp.start_tool_call(
                cid, command, kind="execute", status="in_progress", raw_input={"command": command}
            ),
        )
        term = await self.client.create_terminal(session_id=sid, command="sh", args=["-c", command])
        exited = await self.client.wait_for_terminal_exit(
            session_id=sid, terminal_id=term.terminal_id
        )
        output = await self.client.terminal_output(session_id=sid, terminal_id=term.terminal_id)
        await self.client.release_terminal(session_id=sid, terminal_id=term.terminal_id)
        await self.client.session_update(
            sid,
            acp.update_tool_call(
                cid,
                status="completed" if exited.exit_code == 0 else "failed",
                raw_output={"output": output.output, "exit_code": exited.exit_code},
            ),
        )

    async def do_spawn(self, sid: str, pidfile: str) -> None:
        child = subprocess.Popen(["sleep", "300"], start_new_session=True)
        with open(pidfile, "w") as f:
            f.write(f"{os.getpid()} {child.pid}")

    async def do_usage(self, sid: str, rest: str) -> None:
        tokens_in, tokens_out, usd = rest.split()
        await self.client.session_update(
            sid,
            UsageUpdate(
                session_update="usage_update",
                used=int(tokens_in) + int(tokens_out),
                size=200_000,
                cost=Cost(amount=float(usd), currency="USD"),
            ),
        )
        self.usage = Usage(
            input_tokens=int(tokens_in),
            output_tokens=int(tokens_out),
            total_tokens=int(tokens_in) + int(tokens_out),
            cached_read_tokens=7,
        )

    async def do_recall(self, sid: str, rest: str) -> None:
        earlier = [text for role, text in self.history.get(sid, []) if role == "user"][:-1]
        await self.do_say(sid, "I remember: " + " | ".join(earlier))

    async def do_sessions(self, sid: str, rest: str) -> None:
        await self.do_say(sid, f"sessions opened: {self.opened}")

    async def do_quote(self, sid: str, word: str) -> None:
        found = any(
            word in line for line in self.prompt_text.splitlines() if not line.startswith("quote ")
        )
        await self.do_say(sid, f"{word} is {'' if found else 'not '}in the prompt")

    async def do_stop(self, sid: str, reason: str) -> str:
        return f"stop:{reason}"

    async def do_sleep(self, sid: str, seconds: str) -> None:
        await asyncio.sleep(float(seconds))

    async def do_hang(self, sid: str, rest: str) -> str:
        await self.cancelled.wait()
        return "cancelled"

    async def do_hang_hard(self, sid: str, rest: str) -> None:
        await asyncio.sleep(3600)

    async def do_crash(self, sid: str, code: str) -> None:
        secret = os.environ.get("ACP_TEST_SECRET", "")
        for i in range(30):
            sys.stderr.write(f"noise line {i}\n")
        sys.stderr.write(f"fatal: cannot go on with key {secret}\n")
        sys.stderr.flush()
        os._exit(int(code or 1))


def main(argv: list[str]) -> None:
    sessions = Path(argv[argv.index("--sessions") + 1]) if "--sessions" in argv else None
    agent = ScriptedAgent(sessions, fork="--fork" in argv)
    asyncio.run(acp.run_agent(agent, use_unstable_protocol=True))


if __name__ == "__main__":
    main(sys.argv[1:])
