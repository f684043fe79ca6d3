"""ACPSession: a conversation run by an external agent over the Agent Client Protocol.

The conversation calls it as it calls our own AgentSession (`agent_server.agent.session.
Session`). The agent runs as a child process (AgentProcess); a run sends the user messages the
agent has not seen as one prompt and relays the turn as events:

    user MessageEvents ---prompt---> agent
    agent_message_chunk  -> StreamingDeltaEvents (live), a MessageEvent when the text ends
    tool_call / _update  -> an ACPToolCallEvent at its start and at each change of status
    request_permission   -> WAITING_FOR_CONFIRMATION when the policy says so; the answer
                            (accept, reject) goes back over ACP
    end of the turn      -> FINISHED (or the next prompt, when the user wrote meanwhile)

The prompt outlives a run: a run that waits for confirmation ends while the agent's request
stays open, and the run that accepts picks the same turn up again. An interrupt sends
`session/cancel` and ends the run at once; the cancelled turn is drained before the next
prompt. A crash is a ConversationErrorEvent with the exit status and the last stderr lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import acp
from acp import PROTOCOL_VERSION, RequestError
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    PermissionOption,
    PromptResponse,
    RequestPermissionResponse,
    ResourceContentBlock,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

from agent_server.agent.acp.calls import ToolCalls, ToolCallState
from agent_server.agent.acp.client import SessionUpdate, WorkspaceClient
from agent_server.agent.acp.process import AgentProcess
from agent_server.agent.acp.terminals import Terminals
from agent_server.agent.confirmation import needs_risk_confirmation
from agent_server.agent.session import ConversationSpec, RunControl, ToolServices
from agent_server.agent.sink import DeltaStream, EventSink
from agent_server.agent.skills import SkillList
from agent_server.agent.spec import ACPAgentSpec
from agent_server.log import Query
from agent_server.status import ExecutionStatus
from core.files import read_json, write_json
from core.processes import child_env
from events import (
    ConversationErrorEvent,
    Event,
    ImageContent,
    Message,
    MessageEvent,
    TextContent,
    UserRejectObservation,
    parse_event,
)
from web.errors import Conflict, invalid

logger = logging.getLogger(__name__)

S = ExecutionStatus
#: Seconds a cancelled turn gets to end before the agent process is stopped instead.
CANCEL_GRACE = 10.0
#: Seconds to wait for a crashed process's exit status.
EXIT_WAIT = 5.0
#: The text of one agent message is kept up to this many characters.
MAX_MESSAGE_CHARS = 200_000
#: User messages sent in one prompt at most (older unsent ones are left out).
MAX_PROMPT_MESSAGES = 50
#: `${NAME}` in acp_env values.
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
STATE_FILE = "acp.json"


class ACPFailure(Exception):
    """Ends a run in ERROR with a ConversationErrorEvent of this code and detail."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code, self.detail = code, detail


@dataclass
class PermissionWait:
    """A permission request of the agent waiting for the user's answer."""

    call: ToolCallState
    options: list[PermissionOption]
    answer: asyncio.Future[RequestPermissionResponse] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())
    #: The ACPToolCallEvent that shows what waits (a rejection names it as its action).
    event_id: str = ""

    def reply(self, response: RequestPermissionResponse) -> None:
        if not self.answer.done():
            self.answer.set_result(response)


class ACPSession:
    def __init__(self, spec: ConversationSpec, sink: EventSink, control: RunControl,
                 secrets: Mapping[str, str], services: ToolServices) -> None:
        assert isinstance(spec.agent, ACPAgentSpec)
        self.agent: ACPAgentSpec = spec.agent
        self.spec, self.sink, self.control = spec, sink, control
        #: The live secret values (the conversation keeps the dict current).
        self.secrets = secrets
        self.terminals = Terminals(spec.working_dir, self._env)
        self.client = WorkspaceClient(spec.working_dir, self, self.terminals)
        self._proc: AgentProcess | None = None
        self._conn: ClientSideConnection | None = None
        self._session_id: str | None = None
        #: The prompt in flight, if any; it may outlive the run that sent it.
        self._turn: asyncio.Task[PromptResponse] | None = None
        #: Set once the turn in flight was cancelled (interrupt, rejection): drained, not read.
        self._cancelled = False
        self._waiting: PermissionWait | None = None
        #: Set when a permission request needs the user: the run waiting on the turn returns.
        self._asked = asyncio.Event()
        self._calls = ToolCalls()
        self._text: list[str] = []
        self._thoughts: list[str] = []
        self._chars = 0
        self._deltas: DeltaStream | None = None
        self._activity = time.monotonic()
        #: The id of the last user message sent to the agent (kept in STATE_FILE).
        self._prompted: str | None = None
        self._state_loaded = False
        self._start_lock = asyncio.Lock()

    # -- what the conversation calls -------------------------------------------------------

    async def open(self) -> None:
        """Refuse a command that cannot be found (422), before anything is stored."""
        program = self.agent.acp_command[0]
        if shutil.which(program, path=self._env().get("PATH")) is None and not (
                os.sep in program and os.access(self.spec.working_dir / program, os.X_OK)):
            raise invalid(["agent", "acp_command", 0],
                          f"{program!r} is not an executable found on PATH", input_=program)

    async def run(self) -> ExecutionStatus:
        try:
            return await self._run()
        except ACPFailure as failure:
            detail = self.sink.masker.text(failure.detail)[:2000]
            await self.sink.append(*self._flush_message(), *self._close_calls("failed"),
                                   ConversationErrorEvent(source="environment", code=failure.code,
                                                          detail=detail))
            return S.ERROR
        except asyncio.CancelledError:
            await asyncio.shield(self._interrupted())
            raise

    async def reject_pending(self, reason: str) -> None:
        """The permission waiting is refused over ACP, and the turn ends (the conversation
        rests after a rejection, as it does for our own agent)."""
        wait, self._waiting = self._waiting, None
        if wait is None:
            return
        await self.sink.append(UserRejectObservation(
            tool_name=wait.call.title or wait.call.tool_kind or "acp_tool_call",
            tool_call_id=wait.call.tool_call_id, action_id=wait.event_id,
            rejection_reason=reason))
        await self._cancel_turn()  # first: the agent reads the answer knowing the turn is over
        wait.reply(_choose(wait.options, allow=False))

    async def prepare_user_message(self, event: MessageEvent) -> None:
        return None

    async def on_user_message(self, event: MessageEvent) -> bool:
        return False

    async def skills(self) -> SkillList:
        return SkillList(skills=[])  # an ACP agent keeps its own

    async def ask(self, question: str) -> str:
        raise Conflict("ask_agent is not available for an ACP agent")

    async def follow_llm(self) -> None:
        return None  # the ACP agent chooses its own model

    def forget_view(self) -> None:
        return None  # the agent keeps its own context; a new branch's messages are sent anew

    async def close(self) -> None:
        """Stop the agent process (its whole tree) and its terminals."""
        if self._waiting is not None:
            self._waiting.reply(_cancelled())
            self._waiting = None
        await self._stop_process()
        await self.terminals.close()

    # -- Reports (what the client hands over) ----------------------------------------------

    def check(self, session_id: str) -> None:
        if session_id != self._session_id:
            raise RequestError.invalid_params({"details": f"unknown session {session_id}"})

    async def on_update(self, update: SessionUpdate) -> None:
        """One notification of the turn: its events are made here, in arrival order, and
        appended in one call (the log orders appends by their call)."""
        self._activity = time.monotonic()
        events: list[Event] = []
        if isinstance(update, AgentMessageChunk | AgentThoughtChunk):
            text = _text(update.content)
            if text:
                self._add_text(text, thought=isinstance(update, AgentThoughtChunk))
        elif isinstance(update, ToolCallStart):
            events += self._flush_message()
            call = self._calls.get(update.tool_call_id)
            call.merge(update)
            events.append(call.event())
        elif isinstance(update, ToolCallProgress):
            call = self._calls.get(update.tool_call_id)
            before = call.status
            call.merge(update)
            if call.status != before:  # every change of status is told; content rides along
                events += self._flush_message()
                events.append(call.event())
        if events:
            await self.sink.append(*events)

    async def on_permission(self, tool_call: ToolCallUpdate,
                            options: list[PermissionOption]) -> RequestPermissionResponse:
        self._activity = time.monotonic()
        call = self._calls.get(tool_call.tool_call_id)
        call.merge(tool_call)
        if self._cancelled or self._turn is None:
            return _cancelled()
        if not needs_risk_confirmation(self.control.confirmation_policy, call.risk):
            return _choose(options, allow=True)
        wait = PermissionWait(call, options)
        if self._waiting is not None:  # one question at a time: the older one is withdrawn
            self._waiting.reply(_cancelled())
        self._waiting = wait
        stored = await self.sink.append(*self._flush_message(), call.event(status="pending"))
        wait.event_id = stored[-1].id or ""
        self._asked.set()
        try:
            return await wait.answer
        finally:
            if self._waiting is wait:
                self._waiting = None

    # -- the run ---------------------------------------------------------------------------

    async def _run(self) -> ExecutionStatus:
        approved, self.control.approved = self.control.approved, False
        if self._turn is not None and self._cancelled:
            await self._drain()
        if self._waiting is not None:
            if not approved:
                return S.WAITING_FOR_CONFIRMATION
            self._waiting.reply(_choose(self._waiting.options, allow=True))
            self._waiting = None
        while True:
            if self._turn is None:
                if self.control.pause_requested:
                    return S.PAUSED
                messages = await self._unsent()
                if not messages:
                    return S.FINISHED
                await self._ensure_started()
                await self._prompt(messages)
            response = await self._wait_turn()
            if response is None:
                return S.WAITING_FOR_CONFIRMATION
            await self.sink.append(*self._flush_message(), *self._close_calls("completed"))
            reason = str(response.stop_reason)
            if reason == "cancelled":  # the agent ended the turn itself
                return S.PAUSED
            if reason != "end_turn":
                raise ACPFailure("ACPStopReason", f"The ACP agent ended its turn: {reason}.")

    async def _prompt(self, messages: list[MessageEvent]) -> None:
        assert self._conn is not None and self._session_id is not None
        blocks: list[TextContentBlock | ResourceContentBlock] = []
        for message in messages:
            blocks += _blocks(message)
        last = messages[-1].id
        self._prompted = last
        await asyncio.to_thread(write_json, self.spec.state_dir / STATE_FILE, {"prompted": last})
        self._calls.clear()
        self._cancelled = False
        self._asked.clear()
        self._activity = time.monotonic()
        self._turn = asyncio.create_task(
            self._conn.prompt(session_id=self._session_id, prompt=list(blocks)),
            name=f"acp prompt {self.spec.id}")

    async def _wait_turn(self) -> PromptResponse | None:
        """The turn's end (None: a permission now waits for the user); raises ACPFailure
        when the agent fails, dies or goes quiet for longer than acp_prompt_timeout."""
        turn = self._turn
        assert turn is not None
        while True:
            asked = asyncio.create_task(self._asked.wait())
            try:
                quiet = time.monotonic() - self._activity
                await asyncio.wait({turn, asked}, timeout=max(self.agent.acp_prompt_timeout
                                                              - quiet, 0.01),
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                asked.cancel()
            if turn.done():
                self._turn = None
                return await self._turn_result(turn)
            if self._asked.is_set():
                self._asked.clear()
                if self._waiting is not None:
                    return None
            elif time.monotonic() - self._activity >= self.agent.acp_prompt_timeout:
                await self._cancel_turn()
                raise ACPFailure("ACPTimeout", f"The ACP agent sent nothing for "
                                               f"{self.agent.acp_prompt_timeout:g} s.")

    async def _turn_result(self, turn: asyncio.Task[PromptResponse]) -> PromptResponse:
        try:
            return turn.result()
        except RequestError as exc:
            raise ACPFailure("ACPRequestError", _request_error(exc)) from None
        except (ConnectionError, OSError) as exc:
            raise await self._crashed(f"during the turn ({exc})") from None

    async def _crashed(self, when: str) -> ACPFailure:
        """The process is gone (or its pipes are): its exit status and last stderr lines."""
        proc = self._proc
        if proc is None:
            return ACPFailure("ACPAgentExited", f"The ACP agent stopped {when}.")
        await proc.exited(EXIT_WAIT)
        failure = ACPFailure("ACPAgentExited",
                             f"The ACP agent ({self.agent.acp_command[0]}) stopped {when}: "
                             f"{proc.exit_text()}.\nLast stderr lines:\n{proc.stderr_tail()}")
        await self._stop_process()
        return failure

    async def _drain(self) -> None:
        """Let a cancelled turn end (its last events stored); past CANCEL_GRACE the process
        is stopped instead (the next prompt starts a new one)."""
        turn = self._turn
        if turn is None:
            return
        done, _ = await asyncio.wait({turn}, timeout=CANCEL_GRACE)
        if not done:
            logger.warning("ACP agent of %s did not end a cancelled turn: stopping it",
                           self.spec.id)
            await self._stop_process()
        elif not turn.cancelled() and turn.exception() is not None:
            logger.info("cancelled ACP turn of %s ended with %r", self.spec.id, turn.exception())
        self._turn = None
        self._cancelled = False
        await self.sink.append(*self._flush_message(), *self._close_calls("failed"))

    async def _cancel_turn(self) -> None:
        """Send session/cancel for the turn in flight (its end is drained later)."""
        if self._turn is None or self._turn.done() or self._cancelled:
            return
        self._cancelled = True
        if self._waiting is not None:
            self._waiting.reply(_cancelled())
            self._waiting = None
        if self._conn is not None and self._session_id is not None:
            try:
                await asyncio.wait_for(self._conn.cancel(session_id=self._session_id), 2)
            except Exception as exc:  # a dead or stuck agent: the drain stops it
                logger.info("session/cancel to the ACP agent of %s failed: %r", self.spec.id, exc)

    async def _interrupted(self) -> None:
        """The run was cancelled (interrupt, shutdown): cancel the turn, keep what was said."""
        await self._cancel_turn()
        with contextlib.suppress(Exception):  # the log may be closing with the server
            await self.sink.append(*self._flush_message(),
                                   *self._close_calls("failed", "Interrupted."))

    # -- the process -----------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        """The agent's environment: the server's without its keys, the commit author, the
        conversation's secrets by name, then acp_env with `${NAME}` filled from them."""
        secrets = {k: v for k, v in self.secrets.items()
                   if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)}
        own = {k: PLACEHOLDER.sub(lambda m: self.secrets.get(m.group(1), ""), v)
               for k, v in self.agent.acp_env.items()}
        return child_env(self.spec.git_author, secrets, own)

    async def _ensure_started(self) -> None:
        async with self._start_lock:
            if self._proc is not None and self._proc.returncode is None:
                return
            if self._proc is not None:  # it ended between turns: a new one takes over
                logger.info("ACP agent of %s had ended (%s): starting it again", self.spec.id,
                            self._proc.exit_text())
                await self._stop_process()
            try:
                await asyncio.wait_for(self._start(), self.agent.acp_startup_timeout)
            except TimeoutError:
                await self._stop_process()
                raise ACPFailure("ACPStartTimeout", "The ACP agent did not answer initialize "
                                 f"and session/new within {self.agent.acp_startup_timeout:g} s."
                                 ) from None
            except BaseException:
                await self._stop_process()
                raise

    async def _start(self) -> None:
        argv = [*self.agent.acp_command, *self.agent.acp_args]
        try:
            self._proc = await AgentProcess.start(argv, self.spec.working_dir, self._env(),
                                                  self.sink.masker.text)
        except OSError as exc:
            raise ACPFailure("ACPStartFailed",
                             f"Cannot start {argv[0]}: {exc.strerror or exc}.") from None
        self._conn = acp.connect_to_agent(self.client, self._proc.writer, self._proc.reader)
        capabilities = ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True)
        try:
            hello = await self._conn.initialize(
                protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities,
                client_info=Implementation(name="agent-server", version="0.1.0"))
            if hello.protocol_version != PROTOCOL_VERSION:
                raise ACPFailure("ACPStartFailed",
                                 f"The ACP agent speaks protocol version {hello.protocol_version}"
                                 f"; this server speaks {PROTOCOL_VERSION}.")
            session = await self._conn.new_session(cwd=str(self.spec.working_dir),
                                                   mcp_servers=[])
        except RequestError as exc:
            raise ACPFailure("ACPStartFailed", _request_error(exc)) from None
        except (ConnectionError, OSError) as exc:
            raise await self._crashed(f"while starting ({exc})") from None
        self._session_id = session.session_id

    async def _stop_process(self) -> None:
        turn, self._turn = self._turn, None
        conn, self._conn = self._conn, None
        proc, self._proc = self._proc, None
        self._session_id = None
        self._cancelled = False
        if turn is not None and not turn.done():
            turn.cancel()
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
        if turn is not None:
            await asyncio.gather(turn, return_exceptions=True)
        if proc is not None:
            await proc.stop()

    # -- messages --------------------------------------------------------------------------

    async def _unsent(self) -> list[MessageEvent]:
        """The user's messages on the current branch after the last one sent to the agent."""
        if not self._state_loaded:
            self._state_loaded = True
            with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                state = await asyncio.to_thread(read_json, self.spec.state_dir / STATE_FILE)
                self._prompted = state.get("prompted")
        log = await self.sink.log()
        await log.drain()
        query = Query(kind="MessageEvent", source="user", branch=log.head)
        lines, _ = log.search(query, MAX_PROMPT_MESSAGES + 1, page_id=self._prompted)
        out: list[MessageEvent] = []
        for line in lines:
            event = parse_event(line)
            if isinstance(event, MessageEvent) and (self._prompted is None
                                                    or (event.id or "") > self._prompted):
                out.append(event)
        return out[:MAX_PROMPT_MESSAGES]  # the rest go in the next prompt

    def _add_text(self, text: str, thought: bool) -> None:
        if self._chars < MAX_MESSAGE_CHARS:
            piece = text[:MAX_MESSAGE_CHARS - self._chars]
            (self._thoughts if thought else self._text).append(piece)
            self._chars += len(piece)
        if self._deltas is None:
            self._deltas = self.sink.deltas()
        self._deltas.feed(None if thought else text, text if thought else None)

    def _flush_message(self) -> list[Event]:
        """The agent's text so far as one MessageEvent (none when it said nothing)."""
        if self._deltas is not None:
            self._deltas.flush()
            self._deltas = None
        text, thoughts = "".join(self._text), "".join(self._thoughts)
        cut = self._chars >= MAX_MESSAGE_CHARS
        self._text, self._thoughts, self._chars = [], [], 0
        if not text and not thoughts:
            return []
        if cut:
            text += "\n[... the rest of this message was cut]"
        return [MessageEvent(source="agent", llm_message=Message(
            role="assistant", content=[TextContent(text=text)],
            reasoning_content=thoughts or None))]

    def _close_calls(self, status: str, why: str | None = None) -> list[Event]:
        """The calls of a turn that ended without finishing them, told as `status`."""
        out: list[Event] = []
        for call in self._calls.unfinished():
            call.status = status
            if why is not None and call.raw_output is None:
                call.raw_output = why
            out.append(call.event())
        return out


def _text(block: Any) -> str:
    return block.text if isinstance(block, TextContentBlock) else ""


def _blocks(message: MessageEvent) -> list[TextContentBlock | ResourceContentBlock]:
    out: list[TextContentBlock | ResourceContentBlock] = []
    for item in message.llm_message.content:
        if isinstance(item, TextContent):
            out.append(acp.text_block(item.text))
        elif isinstance(item, ImageContent):
            for url in item.image_urls:
                out.append(acp.resource_link_block(name="image", uri=url))
    for extra in message.extended_content:
        out.append(acp.text_block(extra.text))
    return out


def _choose(options: list[PermissionOption], allow: bool) -> RequestPermissionResponse:
    """The agent's own option for allowing (once, else always) or rejecting; a rejection
    with no reject option is told as cancelled."""
    kinds = ("allow_once", "allow_always") if allow else ("reject_once", "reject_always")
    for kind in kinds:
        for option in options:
            if option.kind == kind:
                return RequestPermissionResponse(
                    outcome=AllowedOutcome(outcome="selected", option_id=option.option_id))
    if allow and options:
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=options[0].option_id))
    return _cancelled()


def _cancelled() -> RequestPermissionResponse:
    return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


def _request_error(exc: RequestError) -> str:
    data = f" {exc.data}" if exc.data is not None else ""
    return f"The ACP agent answered an error {exc.code}: {exc}{data}"[:4000]
