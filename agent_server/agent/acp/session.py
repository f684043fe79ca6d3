"""ACPSession: a conversation run by an external agent over the Agent Client Protocol.

The conversation calls it as it calls our own AgentSession, through the narrower
`contract.Session` (an ACP agent keeps its own model, skills and hooks). The agent runs as a
child process (`process.AgentConnection`); a run sends the user messages the agent has not
seen as one prompt and relays the turn as events:

    user MessageEvents ---prompt---> agent
    agent_message_chunk  -> StreamingDeltaEvents (live), a MessageEvent when the text ends
    tool_call / _update  -> an ACPToolCallEvent at its start and at each change of status
    request_permission   -> WAITING_FOR_CONFIRMATION when the policy says so; the answer
                            (accept, reject) goes back over ACP, to every request waiting
                            (an agent may ask about several tool calls at once)
    end of the turn      -> FINISHED (or the next prompt, when the user wrote meanwhile)

The prompt outlives a run: a run that waits for confirmation ends while the agent's request
stays open, and the run that accepts picks the same turn up again. An interrupt sends
`session/cancel` and ends the run at once; the cancelled turn is drained before the next
prompt. Where the turn is is one `TurnState`, moved only along TURN_MOVES. A crash is a
ConversationErrorEvent with the exit status and the last stderr lines.

The agent's process and the protocol session over it are the link's (`link.AgentLink`): it is
started when first needed, and again after a crash or a restart of this server, when a new
agent process resumes the agent's session with `session/load` if the agent offers it
(`saved.py` keeps the session's id); what the agent replays while it loads is already in the
log and is dropped. When it cannot, a ServerErrorEvent `ACPSessionLost` tells the user, at the
next turn, that the agent starts again without its memory. A side question (ask_agent) goes
to a session of its own (`side.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Mapping

from acp import RequestError
from acp.schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    PermissionOption,
    PromptResponse,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
)

from agent_server.agent.acp.calls import PermissionWait, ToolCalls, cancelled, choose
from agent_server.agent.acp.client import SessionUpdate, WorkspaceClient
from agent_server.agent.acp.link import AgentLink
from agent_server.agent.acp.messages import (
    AgentMessage,
    PromptBlock,
    chunk_text,
    prompt_blocks,
    unsent,
)
from agent_server.agent.acp.process import (
    GONE,
    ACPFailure,
    AgentConnection,
    agent_env,
    request_error,
)
from agent_server.agent.acp.saved import STATE_FILE, SavedFile
from agent_server.agent.acp.side import SideSessions, ask
from agent_server.agent.acp.terminals import Terminals
from agent_server.agent.acp.traced import CallTelemetry
from agent_server.agent.acp.turn import TURN, TurnState
from agent_server.agent.acp.usage import ACPUsage
from agent_server.agent.confirmation import needs_risk_confirmation
from agent_server.agent.contract import ConversationSpec, RunControl
from agent_server.agent.sink import EventSink
from agent_server.agent.spec import ACPAgentSpec
from agent_server.agent.usage import Metrics
from agent_server.telemetry import Telemetry
from events import ConversationErrorEvent, Event, MessageEvent, UserRejectObservation
from events.status import ExecutionStatus
from web.errors import UpstreamError, invalid

logger = logging.getLogger(__name__)

#: Seconds a cancelled turn gets to end before the agent process is stopped instead.
CANCEL_GRACE = 10.0


class ACPSession:
    """The conversation's side of an ACP agent: its runs, its turn and what the agent asks of
    it (the client's reports); the agent's process is `link`'s."""

    def __init__(
        self,
        spec: ConversationSpec,
        sink: EventSink,
        control: RunControl,
        secrets: Mapping[str, str],
        metrics: Metrics,
        telemetry: Telemetry | None = None,
    ) -> None:
        assert isinstance(spec.agent, ACPAgentSpec)
        self.agent: ACPAgentSpec = spec.agent
        self.usage = ACPUsage(metrics, self.agent.llm.model, self.agent.llm.usage_id)
        self.traced = CallTelemetry(telemetry, sink.masker.text)
        self.spec, self.sink, self.control = spec, sink, control
        #: The live secret values (the conversation keeps the dict current).
        self.secrets = secrets
        self.terminals = Terminals(spec.working_dir, self._env)
        self.client = WorkspaceClient(spec.working_dir, self, self.terminals)
        #: The agent's message under way (its text and thought chunks).
        self.message = AgentMessage(sink)
        self._state = TurnState.IDLE
        #: The prompt in flight (not IDLE); it may outlive the run that sent it.
        self._turn: asyncio.Task[PromptResponse] | None = None
        #: The permission requests waiting for the user, in the order asked (ASKING).
        self._waiting: list[PermissionWait] = []
        #: Set when a permission request needs the user: the run waiting on the turn returns.
        self._asked = asyncio.Event()
        self._calls = ToolCalls()
        self._activity = self._sent_at = time.monotonic()
        #: The last message prompted and the agent's session, across restarts.
        self.saved = SavedFile(spec.state_dir / STATE_FILE)
        #: The agent's process and its protocol session, started when first needed.
        self.link = AgentLink(
            self.agent,
            spec.working_dir,
            saved=self.saved,
            client=self.client,
            sink=sink,
            usage=self.usage,
            env=self._env,
            ended=self._disconnect,
            name=spec.id,
        )
        #: The side questions' sessions, by id: what the agent says there is their answer.
        self.sides = SideSessions()

    # -- what the conversation calls -------------------------------------------------------

    async def open(self) -> None:
        """Refuse a command that cannot be found (422), before anything is stored."""
        program = self.agent.acp_command[0]
        if shutil.which(program, path=self._env().get("PATH")) is None and not (
            os.sep in program and os.access(self.spec.working_dir / program, os.X_OK)
        ):
            raise invalid(
                ["agent", "acp_command", 0],
                f"{program!r} is not an executable found on PATH",
                input_=program,
            )

    async def run(self, approved: bool = False) -> ExecutionStatus:
        try:
            return await self._run(approved)
        except ACPFailure as failure:
            self.traced.end_all("error")
            detail = self.sink.masker.text(failure.detail)[:2000]
            await self.sink.append(
                *self.message.end(),
                *self._calls.end("failed"),
                ConversationErrorEvent(source="environment", code=failure.code, detail=detail),
            )
            return ExecutionStatus.ERROR
        except asyncio.CancelledError:
            await asyncio.shield(self._interrupted())
            raise

    async def reject_pending(self, reason: str) -> None:
        """The permission waiting is refused over ACP, and the turn ends (the conversation
        rests after a rejection, as it does for our own agent)."""
        waits = self._answered()
        if not waits:
            return
        await self.sink.append(
            *(
                UserRejectObservation(
                    tool_name=wait.call.title or wait.call.tool_kind or "acp_tool_call",
                    tool_call_id=wait.call.tool_call_id,
                    action_id=wait.event_id,
                    rejection_reason=reason,
                )
                for wait in waits
            )
        )
        await self._cancel_turn()  # first: the agent reads the answer knowing the turn is over
        for wait in waits:
            wait.reply(choose(wait.options, allow=False))

    async def ask(self, question: str) -> str:
        """A side question, in a session of its own (502 when the agent fails to answer)."""
        try:
            if not self.link.alive and self._state is not TurnState.IDLE:
                raise ACPFailure("ACPAgentExited", "The ACP agent stopped during the turn.")
            return await ask(
                await self.link.connected(quiet=True),
                self.spec.working_dir,
                question,
                self.sink,
                self.sides,
                self.agent.acp_prompt_timeout,
                self.usage,
            )
        except ACPFailure as failure:
            raise UpstreamError(
                failure.code, self.sink.masker.text(failure.detail)[:2000]
            ) from None

    async def close(self) -> None:
        """Stop the agent process (its whole tree) and its terminals."""
        await self._disconnect()
        await self.terminals.close()

    # -- Reports (what the client hands over) ----------------------------------------------

    def check(self, session_id: str) -> bool:
        if self.sides.get(session_id) is not None:
            return True
        if not self.link.owns(session_id):
            raise RequestError.invalid_params({"details": f"unknown session {session_id}"})
        return False

    async def on_update(self, session_id: str, update: SessionUpdate) -> None:
        """One notification of the turn: its events are made here, in arrival order, and
        appended in one call (the log orders appends by their call)."""
        if (side := self.sides.get(session_id)) is not None:
            side.add(update)
            return
        if self.link.replaying is not None:  # the loaded session's history: the log has it
            return
        self._activity = time.monotonic()
        events: list[Event] = []
        if isinstance(update, AgentMessageChunk | AgentThoughtChunk):
            text = chunk_text(update.content)
            if text:
                self.message.add(text, thought=isinstance(update, AgentThoughtChunk))
        elif isinstance(update, ToolCallStart):
            events += self.message.end()
            call = self._calls.get(update.tool_call_id)
            call.merge(update)
            self.traced.seen(call)
            events.append(call.event())
        elif isinstance(update, UsageUpdate):
            self.usage.update(update)
        elif isinstance(update, ToolCallProgress):
            call = self._calls.get(update.tool_call_id)
            before = call.status
            call.merge(update)
            self.traced.seen(call)
            if call.status != before:  # every change of status is told; content rides along
                events += self.message.end()
                events.append(call.event())
        if events:
            await self.sink.append(*events)

    async def on_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        if self.sides.get(session_id) is not None:  # a side question changes nothing
            return choose(options, allow=False)
        self._activity = time.monotonic()
        call = self._calls.get(tool_call.tool_call_id)
        call.merge(tool_call)
        self.traced.seen(call)
        if self._state in (TurnState.IDLE, TurnState.CANCELLED):
            return cancelled()
        if not needs_risk_confirmation(self.control.confirmation_policy, call.risk):
            return choose(options, allow=True)
        wait = PermissionWait(call, options)
        self._move(TurnState.ASKING)  # a request already waiting keeps waiting beside it
        self._waiting.append(wait)
        stored = await self.sink.append(*self.message.end(), call.event(status="pending"))
        wait.event_id = stored[-1].id or ""
        self._asked.set()
        try:
            return await wait.answer
        finally:
            if wait in self._waiting:  # withdrawn by the agent: the others still wait
                self._waiting.remove(wait)
                if not self._waiting:
                    self._answered()

    # -- the turn's state --------------------------------------------------------------------

    def _move(self, to: TurnState) -> None:
        TURN.check(self._state, to, f"an ACP turn is {self._state.value}")
        if to is not TurnState.ASKING and self._waiting:
            waits, self._waiting = self._waiting, []
            for wait in waits:
                wait.reply(cancelled())  # withdrawn: no longer asked
        self._state = to

    def _answered(self) -> list[PermissionWait]:
        """The permissions waiting (if any) are taken to be answered: the agent works on."""
        waits, self._waiting = self._waiting, []
        if self._state is TurnState.ASKING:
            self._move(TurnState.WORKING)
        return waits

    # -- the run ---------------------------------------------------------------------------

    async def _run(self, approved: bool) -> ExecutionStatus:
        if self._state is TurnState.CANCELLED:
            await self._drain()
        if self._state is TurnState.ASKING:
            if not approved:
                return ExecutionStatus.WAITING_FOR_CONFIRMATION
            for wait in self._answered():
                wait.reply(choose(wait.options, allow=True))
        while True:
            if self._state is TurnState.IDLE:
                if self.control.pause_requested:
                    return ExecutionStatus.PAUSED
                messages = await unsent(self.sink, (await self.saved.get()).prompted)
                if not messages:
                    return ExecutionStatus.FINISHED
                await self._prompt(await self.link.connected(), messages)
            response = await self._wait_turn()
            if response is None:
                return ExecutionStatus.WAITING_FOR_CONFIRMATION
            self.traced.end_all("ok")
            await self.sink.append(
                *self.message.end(),
                *self._calls.end("completed"),
                *self.usage.turn(response, time.monotonic() - self._sent_at),
            )
            if self.usage.cost_seen != (await self.saved.get()).cost_seen:  # counted: kept
                await self.saved.update(cost_seen=self.usage.cost_seen)
            reason = str(response.stop_reason)
            if reason == "cancelled":  # the agent ended the turn itself
                return ExecutionStatus.PAUSED
            if reason != "end_turn":
                raise ACPFailure("ACPStopReason", f"The ACP agent ended its turn: {reason}.")

    async def _prompt(self, link: AgentConnection, messages: list[MessageEvent]) -> None:
        blocks: list[PromptBlock] = []
        for message in messages:
            blocks += prompt_blocks(message)
        await self.saved.update(prompted=messages[-1].id)
        self.link.replaying = None  # a loaded session's replay ends with the next prompt
        self._calls.clear()
        self._asked.clear()
        self._activity = self._sent_at = time.monotonic()
        self.traced.turn()
        self._move(TurnState.WORKING)
        self._turn = asyncio.create_task(
            link.conn.prompt(session_id=link.session_id, prompt=list(blocks)),
            name=f"acp prompt {self.spec.id}",
        )

    async def _wait_turn(self) -> PromptResponse | None:
        """The turn's end (None: a permission now waits for the user); raises ACPFailure
        when the agent fails, dies or goes quiet for longer than acp_prompt_timeout."""
        turn = self._turn
        assert turn is not None
        while True:
            asked = asyncio.create_task(self._asked.wait())
            try:
                quiet = time.monotonic() - self._activity
                await asyncio.wait(
                    {turn, asked},
                    timeout=max(self.agent.acp_prompt_timeout - quiet, 0.01),
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                asked.cancel()
            if turn.done():
                self._turn = None
                self._move(TurnState.IDLE)
                return await self._turn_result(turn)
            if self._asked.is_set():
                self._asked.clear()
                if self._state is TurnState.ASKING:
                    return None
            elif time.monotonic() - self._activity >= self.agent.acp_prompt_timeout:
                await self._cancel_turn()
                raise ACPFailure(
                    "ACPTimeout",
                    f"The ACP agent sent nothing for {self.agent.acp_prompt_timeout:g} s.",
                )

    async def _turn_result(self, turn: asyncio.Task[PromptResponse]) -> PromptResponse:
        try:
            return turn.result()
        except RequestError as exc:
            raise ACPFailure("ACPRequestError", request_error(exc)) from None
        except GONE:
            raise await self._crashed("during the turn") from None

    async def _crashed(self, when: str) -> ACPFailure:
        """The process is gone (or its pipes are): its exit status and last stderr lines."""
        link = self.link.current
        if link is None:
            return ACPFailure("ACPAgentExited", f"The ACP agent stopped {when}.")
        failure = await link.crashed(when)
        await self._disconnect()
        return failure

    async def _drain(self) -> None:
        """Let a cancelled turn end (its last events stored); past CANCEL_GRACE the process
        is stopped instead (the next prompt starts a new one)."""
        turn = self._turn
        if turn is None:
            return
        done, _ = await asyncio.wait({turn}, timeout=CANCEL_GRACE)
        if not done:
            logger.warning(
                "ACP agent of %s did not end a cancelled turn: stopping it", self.spec.id
            )
            await self._disconnect()
        elif not turn.cancelled() and turn.exception() is not None:
            logger.info("cancelled ACP turn of %s ended with %r", self.spec.id, turn.exception())
        self._turn = None
        self._move(TurnState.IDLE)
        await self.sink.append(*self.message.end(), *self._calls.end("failed"))

    async def _cancel_turn(self) -> None:
        """Send session/cancel for the turn in flight (its end is drained later)."""
        if self._turn is None or self._turn.done() or self._state is TurnState.CANCELLED:
            return
        self._move(TurnState.CANCELLED)
        link = self.link.current
        if link is not None:
            try:
                await asyncio.wait_for(link.conn.cancel(session_id=link.session_id), 2)
            except Exception as exc:  # a dead or stuck agent: the drain stops it
                logger.info("session/cancel to the ACP agent of %s failed: %r", self.spec.id, exc)

    async def _interrupted(self) -> None:
        """The run was cancelled (interrupt, shutdown): cancel the turn, keep what was said."""
        await self._cancel_turn()
        self.traced.end_all("cancelled")
        with contextlib.suppress(Exception):  # the log may be closing with the server
            await self.sink.append(*self.message.end(), *self._calls.end("failed", "Interrupted."))

    # -- the process -----------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        return agent_env(self.agent, self.secrets, self.spec.git_author)

    async def _disconnect(self) -> None:
        """Stop the process (a turn in flight ends with it; a permission waiting is withdrawn)."""
        turn, self._turn = self._turn, None
        self._move(TurnState.IDLE)
        await self.link.drop(turn)
