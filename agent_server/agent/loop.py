"""The agent loop: view -> LLM -> ActionEvents -> tools -> observations, until done.

A run ends by returning the conversation's final status: finished (a `finish` call or a plain
reply, unless a Stop hook objects), paused (a pause request between steps), waiting for
confirmation, error (LLM failure, max iterations), stuck. An interrupt cancels the task;
whatever tool call was left without a result gets an AgentErrorEvent so the history stays
valid for every provider.

`Run` takes its parts (`RunParts`), not the session that owns them: it changes none of them
but the metrics it counts responses in, and what it writes goes through the sink.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agent_server.agent.condenser import Condenser
from agent_server.agent.confirmation import needs_confirmation
from agent_server.agent.contract import RunControl
from agent_server.agent.critic import Critic
from agent_server.agent.hooks import Hooks
from agent_server.agent.llm import ON_RETRY, Completion, LLMFailure, ToolCall
from agent_server.agent.model import Model
from agent_server.agent.sink import EventSink
from agent_server.agent.stuck import Step, StuckDetector
from agent_server.agent.toolbox import Toolbox
from agent_server.agent.usage import Metrics
from agent_server.agent.view import View
from agent_server.telemetry import AgentTelemetry
from events import (
    ActionEvent,
    AgentErrorEvent,
    ConversationErrorEvent,
    ConversationStateUpdateEvent,
    Event,
    Message,
    MessageEvent,
    MessageToolCall,
    ObservationEvent,
    ReasoningItemModel,
    RedactedThinkingBlock,
    SecurityRisk,
    TextContent,
    ThinkingBlock,
    UserRejectObservation,
    parse_event,
)
from events.status import ExecutionStatus
from tools.base import LIVE_OUTPUT, ToolError
from web.errors import validation_text

#: Times a Stop hook may send the agent back to work within one run.
MAX_STOP_BLOCKS = 3


class RunEnded(Exception):
    """Ends a run with a status (and, for errors, a ConversationErrorEvent)."""

    def __init__(self, status: ExecutionStatus, code: str | None = None, detail: str = "") -> None:
        super().__init__(code or status.value)
        self.status, self.code, self.detail = status, code, detail


@dataclass(frozen=True)
class RunParts:
    """What a run works with; the session owns every part and hands the same ones to each run."""

    model: Model
    toolbox: Toolbox
    #: The model's view of the branch, kept current from the log (never by the loop).
    view: View
    sink: EventSink
    #: Read only: the pause request, the confirmation policy, the active LLM, the prompt gate.
    control: RunControl
    hooks: Hooks
    condenser: Condenser
    critic: Critic
    #: The conversation's totals of LLM use (it saves them); each response is counted in.
    metrics: Metrics
    telemetry: AgentTelemetry
    max_iterations: int
    stuck_detection: bool
    #: Runs the SessionStart hooks unless they ran in this process already (the session
    #: keeps that fact: it decides whether SessionEnd runs at its close).
    start_session: Callable[[], Awaitable[None]]


class Run:
    """One run of a conversation's agent: the state that lives as long as the run.

    The view learns of every event (the agent's own included) from the log, never from the
    loop: data flows one way. `approved`: the actions waiting for confirmation were accepted
    (the conversation says so when it starts the run), so they run first.
    """

    def __init__(self, parts: RunParts, approved: bool = False) -> None:
        self.parts = parts
        self.view = parts.view
        self.approved = approved
        self.stuck = StuckDetector()
        self.stop_blocks = 0
        #: The last user message the model had seen when it was last asked.
        self.asked: str | None = self.view.last_user_message_id

    async def __call__(self) -> ExecutionStatus:
        parts = self.parts
        try:
            await parts.start_session()
            if self.approved and await self.act(await pending_actions(self.view, parts.sink)):
                await self.finish()
            await repair(self.view, parts.sink, "The previous run ended before this call finished.")
            for _ in range(parts.max_iterations):
                if parts.control.pause_requested:
                    raise RunEnded(ExecutionStatus.PAUSED)
                with parts.telemetry.step():
                    await self.step()
            raise RunEnded(
                ExecutionStatus.ERROR,
                "MaxIterationsReached",
                f"Stopped after {parts.max_iterations} iterations (max_iterations).",
            )
        except RunEnded as end:
            if end.code is not None:  # masked before it is cut, so no part of a secret stays
                detail = parts.sink.masker.text(end.detail)[:2000]
                await parts.sink.append(
                    ConversationErrorEvent(source="environment", code=end.code, detail=detail)
                )
            return end.status
        except asyncio.CancelledError:
            await asyncio.shield(
                repair(self.view, parts.sink, "Interrupted before this call finished.")
            )
            raise

    async def step(self) -> None:
        """One LLM response and the tool calls it asks for."""
        parts, toolbox = self.parts, self.parts.toolbox
        tools = toolbox.llm_tools()
        async with parts.control.prompt_gate:  # a message still waiting for its hooks stays out
            if await parts.condenser.needed(self.view, tools):
                await parts.condenser.condense(parts.sink, self.view, tools)
            messages = self.view.request()
            self.asked = self.view.last_user_message_id
        try:
            reply = await self.complete(tools, messages)
        except LLMFailure as failure:
            if failure.code != "ContextWindowExceededError":
                raise RunEnded(ExecutionStatus.ERROR, failure.code, failure.detail) from None
            # Too long for the model after all: condense, then try the step once more.
            if not await parts.condenser.condense(parts.sink, self.view, tools):
                raise RunEnded(ExecutionStatus.ERROR, failure.code, failure.detail) from None
            try:
                reply = await self.complete(tools, self.view.request())
            except LLMFailure as again:
                raise RunEnded(ExecutionStatus.ERROR, again.code, again.detail) from None
        await parts.sink.append(self.usage(reply))

        thinking = [_thinking_block(b) for b in reply.thinking_blocks]
        if not reply.tool_calls:
            message = MessageEvent(
                source="agent",
                llm_message=Message(
                    role="assistant",
                    content=[TextContent(text=reply.content)],
                    reasoning_content=reply.reasoning_content,
                    thinking_blocks=thinking,
                    responses_reasoning_item=_reasoning_item(reply),
                ),
                llm_response_id=reply.response_id,
            )
            await parts.critic.score([message], self.view)
            await parts.sink.append(message)
            await self.finish()
            return

        calls = [
            _action_event(toolbox, reply, call, i == 0, thinking)
            for i, call in enumerate(reply.tool_calls)
        ]
        await parts.critic.score([event for event, _ in calls], self.view)
        await parts.sink.append(*(event for event, _ in calls))
        invalid = [_error(event, problem) for event, problem in calls if problem]
        valid = [event for event, problem in calls if not problem]
        policy = parts.control.confirmation_policy
        if any(needs_confirmation(policy, e, toolbox.acts(e.tool_name)) for e in valid):
            if invalid:
                await parts.sink.append(*invalid)
            raise RunEnded(ExecutionStatus.WAITING_FOR_CONFIRMATION)
        if await self.act([(event, problem) for event, problem in calls]):
            await self.finish()
            return
        reason = self.stuck.reason() if parts.stuck_detection else None
        if reason is not None:
            raise RunEnded(ExecutionStatus.STUCK, "AgentStuck", f"The agent looks stuck: {reason}.")

    async def complete(
        self, tools: list[dict[str, Any]], messages: list[dict[str, Any]]
    ) -> Completion:
        parts, deltas = self.parts, self.parts.sink.deltas()
        retries = ON_RETRY.set(parts.sink.retry_notice)
        try:
            return await parts.model.complete(
                parts.control.llm.config, messages, tools, on_delta=deltas.feed
            )
        finally:
            ON_RETRY.reset(retries)
            deltas.flush()

    def usage(self, reply: Completion) -> ConversationStateUpdateEvent:
        """Count the response in the metrics; the `stats` update clients follow."""
        metrics, usage_id = self.parts.metrics, self.parts.control.llm.config.usage_id
        metrics.add(reply.usage, reply.cost, reply.latency)
        return ConversationStateUpdateEvent(
            key="stats",
            value={
                "usage_to_metrics": {usage_id: metrics.model_dump(mode="json")},
                "last_response": {
                    **reply.usage.model_dump(mode="json"),
                    "cost": reply.cost,
                    "latency": reply.latency,
                },
            },
        )

    async def act(self, calls: list[tuple[ActionEvent, str | None]]) -> bool:
        """Run the calls in order; True when `finish` ran (later calls are not run)."""
        finished = False
        known = self.parts.toolbox.tools
        for event, problem in calls:
            name = event.tool_name if event.tool_name in known else "unknown"
            with self.parts.telemetry.tool_call(name, event.tool_call_id) as call:
                if finished:
                    result: Event = _error(
                        event, "Not run: finish was called earlier in this response."
                    )
                    call.outcome = "skipped"
                elif problem:
                    result = _error(event, problem)
                    call.outcome = "invalid"
                else:
                    result = await self.execute(event)
                    call.outcome = _call_outcome(result)
            await self.parts.sink.append(result)
            self.stuck.add(
                Step(
                    f"{event.tool_name} {event.tool_call.arguments}",
                    _outcome(result),
                    _failed(result),
                )
            )
            finished = finished or (
                event.tool_name == "finish" and isinstance(result, ObservationEvent)
            )
        return finished

    async def execute(self, event: ActionEvent) -> Event:
        """One tool call between its PreToolUse and PostToolUse hooks.

        A tool fails in one way only: it raises ToolError (an AgentErrorEvent the model reads).
        An observation with is_error is the tool's own report of a failed command (a non-zero
        exit, say); stuck detection counts both as failures.
        """
        hooks, tool = self.parts.hooks, self.parts.toolbox.tools.get(event.tool_name)
        if tool is None:  # e.g. its MCP server did not come back after a restart
            return _error(event, f"The tool {event.tool_name!r} is not available now.")
        arguments = _arguments(event)
        pre = await hooks.run(
            "PreToolUse",
            tool_name=event.tool_name,
            action_id=event.id,
            details={"tool_input": arguments},
        )
        assert event.id is not None
        if pre.blocked:
            return UserRejectObservation(
                tool_name=event.tool_name,
                tool_call_id=event.tool_call_id,
                action_id=event.id,
                rejection_source="hook",
                rejection_reason=pre.reason or "Blocked by a hook",
            )
        live = LIVE_OUTPUT.set(self.parts.sink.live_output(event.tool_call_id))
        try:
            observation = await tool.run(event.action)
        except ToolError as exc:
            return _error(event, str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a tool bug is the model's problem to hear about, not a crash
            return _error(event, f"{type(exc).__name__}: {exc}")
        finally:
            LIVE_OUTPUT.reset(live)
        post = await hooks.run(
            "PostToolUse",
            tool_name=event.tool_name,
            action_id=event.id,
            details={"tool_input": arguments, "tool_response": observation.text},
        )
        extra = [TextContent(text=c) for c in post.additional_context or []]
        if post.blocked and post.reason:
            extra.append(TextContent(text=f"[PostToolUse hook] {post.reason}"))
        return ObservationEvent(
            tool_name=event.tool_name,
            tool_call_id=event.tool_call_id,
            observation=observation,
            action_id=event.id,
            extended_content=extra,
        )

    async def finish(self) -> None:
        """End the run as finished, unless a Stop hook sends the agent back to work, or the
        user wrote again while the model was answering (the model has not seen that yet)."""
        if self.view.last_user_message_id != self.asked:
            return
        outcome = await self.parts.hooks.run("Stop")
        if outcome.blocked and self.stop_blocks < MAX_STOP_BLOCKS:
            self.stop_blocks += 1
            feedback = outcome.reason or "A Stop hook asked you to continue."
            await self.parts.sink.append(hook_message(f"[Stop hook] {feedback}"))
            return
        raise RunEnded(ExecutionStatus.FINISHED)


async def pending_actions(view: View, sink: EventSink) -> list[tuple[ActionEvent, str | None]]:
    """The stored ActionEvents still waiting for a result, in call order, each with why it
    cannot run (None when it can)."""
    log = await sink.log()
    out: list[tuple[ActionEvent, str | None]] = []
    for pending in list(view.pending.values()):
        line = log.get(pending.action_id)
        event = parse_event(line) if line is not None else None
        if isinstance(event, ActionEvent):
            out.append((event, None if event.action is not None else "Not executable."))
    return out


async def repair(view: View, sink: EventSink, why: str) -> None:
    """Give every tool call still without a result an AgentErrorEvent."""
    await (await sink.log()).drain()  # a result being written now counts: no second one
    errors = [
        AgentErrorEvent(tool_name=p.tool_name, tool_call_id=p.tool_call_id, error=why)
        for p in view.pending.values()
    ]
    if errors:
        await sink.append(*errors)


def _reasoning_item(reply: Completion) -> ReasoningItemModel | None:
    """A Responses API model's reasoning, kept on the step's first event to be sent back."""
    if reply.reasoning_item is None:
        return None
    return ReasoningItemModel.model_validate(reply.reasoning_item)


def _action_event(
    toolbox: Toolbox, reply: Completion, call: ToolCall, first: bool, thinking: list[Any]
) -> tuple[ActionEvent, str | None]:
    """The ActionEvent of one tool call, and why it cannot run (None when it can)."""
    problem: str | None = None
    action = None
    risk, summary = SecurityRisk.UNKNOWN, None
    try:
        args = json.loads(call.arguments or "{}")
        if not isinstance(args, dict):
            raise ValueError("the arguments must be a JSON object")
    except ValueError as exc:
        args, problem = {}, f"Invalid JSON in the arguments of {call.name}: {exc}"
    if isinstance(args.get("security_risk"), str):
        risk = SecurityRisk.__members__.get(args["security_risk"].upper(), SecurityRisk.UNKNOWN)
    if isinstance(args.get("summary"), str):
        summary = args["summary"][:500]
    tool = toolbox.tools.get(call.name)
    if problem is None and tool is None:
        problem = f"Unknown tool {call.name!r}. Available tools: {', '.join(toolbox.tools)}."
    elif problem is None and tool is not None:
        try:
            action = tool.parse(args)
        except ValidationError as exc:
            problem = f"Invalid arguments for {call.name}: {validation_text(exc, 'arguments')}"
    event = ActionEvent(
        thought=[TextContent(text=reply.content)] if first and reply.content else [],
        reasoning_content=reply.reasoning_content if first else None,
        thinking_blocks=thinking if first else [],
        responses_reasoning_item=_reasoning_item(reply) if first else None,
        action=action,
        tool_name=call.name,
        tool_call_id=call.id,
        tool_call=MessageToolCall(
            id=call.id,
            name=call.name,
            arguments=call.arguments,
            responses_item_id=call.item_id,
            origin="completion"
            if reply.reasoning_item is None and call.item_id is None
            else "responses",
        ),
        llm_response_id=reply.response_id,
        security_risk=risk,
        summary=summary,
    )
    return event, problem


def hook_message(text: str) -> MessageEvent:
    """What a hook tells the model, as a user-role message from the hook."""
    return MessageEvent(
        source="hook", llm_message=Message(role="user", content=[TextContent(text=text)])
    )


def _arguments(event: ActionEvent) -> Any:
    try:
        return json.loads(event.tool_call.arguments)
    except ValueError:
        return event.tool_call.arguments


def _error(event: ActionEvent, message: str) -> AgentErrorEvent:
    return AgentErrorEvent(
        tool_name=event.tool_name, tool_call_id=event.tool_call_id, error=message
    )


def _failed(result: Event) -> bool:
    """A failed call, whichever way it failed (an error event, or an observation saying so)."""
    if isinstance(result, ObservationEvent):
        return result.observation.is_error
    return isinstance(result, AgentErrorEvent)


def _call_outcome(result: Event) -> str:
    """A tool call's outcome as telemetry counts it (ok, error, rejected)."""
    if isinstance(result, UserRejectObservation):
        return "rejected"
    return "error" if _failed(result) else "ok"


def _outcome(result: Event) -> str:
    if isinstance(result, ObservationEvent):
        return result.observation.model_dump_json()
    return getattr(result, "error", "") or getattr(result, "rejection_reason", "")


def _thinking_block(block: dict[str, Any]) -> ThinkingBlock | RedactedThinkingBlock:
    if block.get("type") == "redacted_thinking":
        return RedactedThinkingBlock(data=str(block.get("data", "")))
    return ThinkingBlock(thinking=str(block.get("thinking", "")), signature=block.get("signature"))
