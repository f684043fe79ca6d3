"""The agent loop: view -> LLM -> ActionEvents -> tools -> observations, until done.

A run ends by returning with the conversation's final status set: finished (a `finish` call or
a plain reply, unless a Stop hook objects), paused (a pause request between steps), waiting for
confirmation, error (LLM failure, max iterations), stuck. An interrupt cancels the task;
whatever tool call was left without a result gets an AgentErrorEvent so the history stays
valid for every provider.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agent_server.agent import llm
from agent_server.agent.condenser import Condenser
from agent_server.agent.confirmation import needs_confirmation
from agent_server.agent.hooks import run_hooks
from agent_server.agent.runtime import Runtime
from agent_server.agent.stuck import Step, StuckDetector
from agent_server.agent.view import View
from agent_server.events import (
    ActionEvent,
    AgentErrorEvent,
    ConversationErrorEvent,
    ConversationStateUpdateEvent,
    Event,
    Message,
    MessageEvent,
    MessageToolCall,
    ObservationEvent,
    RedactedThinkingBlock,
    SecurityRisk,
    StreamingDeltaEvent,
    TextContent,
    ThinkingBlock,
    UserRejectObservation,
    parse_event,
)
from agent_server.models import ExecutionStatus
from agent_server.repository import prepare_workspace
from tools.base import ToolError

if TYPE_CHECKING:
    from agent_server.conversations import Conversation

#: Times a Stop hook may send the agent back to work within one run.
MAX_STOP_BLOCKS = 3


class RunEnded(Exception):
    """Ends a run with a status (and, for errors, a ConversationErrorEvent)."""

    def __init__(self, status: ExecutionStatus, code: str | None = None, detail: str = "") -> None:
        super().__init__(code or status.value)
        self.status, self.code, self.detail = status, code, detail


class Run:
    """One run of a conversation's agent: the state that lives as long as the run."""

    def __init__(self, conv: Conversation, runtime: Runtime, view: View) -> None:
        self.conv, self.runtime, self.view = conv, runtime, view
        self.stuck = StuckDetector()
        self.stop_blocks = 0
        #: The last user message the model had seen when it was last asked.
        self.asked: str | None = view.last_user_message_id
        self.condenser = Condenser(conv.record.agent.condenser, conv.record.agent.llm)

    async def __call__(self) -> None:
        conv = self.conv
        try:
            await prepare_workspace(conv)  # the selected repository, cloned before anything runs
            if not self.runtime.session_started:
                self.runtime.session_started = True
                started = await run_hooks(conv, "SessionStart")
                if started.context:
                    await conv.append(_hook_message(f"[SessionStart hook] {started.context}"))
            if conv.approved:
                conv.approved = False
                if await self.act(await pending_actions(conv, self.view)):
                    await self.finish()
            await repair(conv, self.view, "The previous run ended before this call finished.")
            for _ in range(conv.record.max_iterations):
                if conv.pause_requested:
                    raise RunEnded(ExecutionStatus.PAUSED)
                await self.step()
            raise RunEnded(ExecutionStatus.ERROR, "MaxIterationsReached",
                           f"Stopped after {conv.record.max_iterations} iterations (max_iterations).")
        except RunEnded as end:
            if end.code is not None:  # masked before it is cut, so no part of a secret stays
                detail = conv.masker.text(end.detail)[:2000]
                await conv.append(ConversationErrorEvent(source="environment", code=end.code,
                                                         detail=detail))
            await conv.set_status(end.status)
        except asyncio.CancelledError:
            await asyncio.shield(repair(conv, self.view, "Interrupted before this call finished."))
            raise

    async def step(self) -> None:
        """One LLM response and the tool calls it asks for."""
        conv, runtime = self.conv, self.runtime
        tools = runtime.llm_tools()
        async with conv.prompt_gate:  # a message still waiting for its hooks stays out
            if await self.condenser.needed(self.view, tools):
                await self.condenser.condense(conv, self.view, tools)
            messages = self.view.request()
            self.asked = self.view.last_user_message_id
        try:
            reply = await self.complete(tools, messages)
        except llm.LLMFailure as failure:
            if failure.code != "ContextWindowExceededError":
                raise RunEnded(ExecutionStatus.ERROR, failure.code, failure.detail) from None
            # Too long for the model after all: condense, then try the step once more.
            if not await self.condenser.condense(conv, self.view, tools):
                raise RunEnded(ExecutionStatus.ERROR, failure.code, failure.detail) from None
            try:
                reply = await self.complete(tools, self.view.request())
            except llm.LLMFailure as again:
                raise RunEnded(ExecutionStatus.ERROR, again.code, again.detail) from None
        await _record_usage(conv, reply)

        thinking = [_thinking_block(b) for b in reply.thinking_blocks]
        if not reply.tool_calls:
            await conv.append(MessageEvent(
                source="agent",
                llm_message=Message(role="assistant", content=[TextContent(text=reply.content)],
                                    reasoning_content=reply.reasoning_content,
                                    thinking_blocks=thinking),
                llm_response_id=reply.response_id,
            ))
            await self.finish()
            return

        calls = [_action_event(runtime, reply, call, i == 0, thinking)
                 for i, call in enumerate(reply.tool_calls)]
        await conv.append(*(event for event, _ in calls))
        invalid = [_error(event, problem) for event, problem in calls if problem]
        valid = [event for event, problem in calls if not problem]
        policy = conv.record.confirmation_policy
        if any(needs_confirmation(policy, e, _acts(runtime, e.tool_name)) for e in valid):
            if invalid:
                await conv.append(*invalid)
            raise RunEnded(ExecutionStatus.WAITING_FOR_CONFIRMATION)
        if await self.act([(event, problem) for event, problem in calls]):
            await self.finish()
            return
        reason = self.stuck.reason() if conv.record.stuck_detection else None
        if reason is not None:
            raise RunEnded(ExecutionStatus.STUCK, "AgentStuck", f"The agent looks stuck: {reason}.")

    async def complete(self, tools: list[dict[str, Any]],
                       messages: list[dict[str, Any]]) -> llm.Completion:
        conv = self.conv
        # Deltas skip the log and its masking: masked here, a secret split between two
        # deltas included (the tail that may begin one waits for the next delta).
        text_mask, reasoning_mask = conv.masker.stream(), conv.masker.stream()

        def on_delta(text: str | None, reasoning: str | None) -> None:
            _delta(conv, text_mask.feed(text) if text else None,
                   reasoning_mask.feed(reasoning) if reasoning else None)

        try:
            return await llm.complete(conv.record.agent.llm, messages, tools, on_delta=on_delta)
        finally:
            _delta(conv, text_mask.flush() or None, reasoning_mask.flush() or None)

    async def act(self, calls: list[tuple[ActionEvent, str | None]]) -> bool:
        """Run the calls in order; True when `finish` ran (later calls are not run)."""
        finished = False
        for event, problem in calls:
            if finished:
                result: Event = _error(event, "Not run: finish was called earlier in this response.")
            elif problem:
                result = _error(event, problem)
            else:
                result = await self.execute(event)
            await self.conv.append(result)
            self.stuck.add(Step(f"{event.tool_name} {event.tool_call.arguments}", _outcome(result),
                                isinstance(result, AgentErrorEvent)))
            finished = finished or (event.tool_name == "finish" and isinstance(result, ObservationEvent))
        return finished

    async def execute(self, event: ActionEvent) -> Event:
        """One tool call between its PreToolUse and PostToolUse hooks."""
        conv, tool = self.conv, self.runtime.tools.get(event.tool_name)
        if tool is None:  # e.g. its MCP server did not come back after a restart
            return _error(event, f"The tool {event.tool_name!r} is not available now.")
        arguments = _arguments(event)
        pre = await run_hooks(conv, "PreToolUse", tool_name=event.tool_name, action_id=event.id,
                              details={"tool_input": arguments})
        assert event.id is not None
        if pre.blocked:
            return UserRejectObservation(tool_name=event.tool_name, tool_call_id=event.tool_call_id,
                                         action_id=event.id, rejection_source="hook",
                                         rejection_reason=pre.reason or "Blocked by a hook")
        try:
            observation = await tool.run(event.action)
        except ToolError as exc:
            return _error(event, str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a tool bug is the model's problem to hear about, not a crash
            return _error(event, f"{type(exc).__name__}: {exc}")
        post = await run_hooks(conv, "PostToolUse", tool_name=event.tool_name, action_id=event.id,
                               details={"tool_input": arguments,
                                        "tool_response": observation.text})
        extra = [TextContent(text=c) for c in post.additional_context or []]
        if post.blocked and post.reason:
            extra.append(TextContent(text=f"[PostToolUse hook] {post.reason}"))
        return ObservationEvent(tool_name=event.tool_name, tool_call_id=event.tool_call_id,
                                observation=observation, action_id=event.id,
                                extended_content=extra)

    async def finish(self) -> None:
        """End the run as finished, unless a Stop hook sends the agent back to work, or the
        user wrote again while the model was answering (the model has not seen that yet)."""
        if self.view.last_user_message_id != self.asked:
            return
        outcome = await run_hooks(self.conv, "Stop")
        if outcome.blocked and self.stop_blocks < MAX_STOP_BLOCKS:
            self.stop_blocks += 1
            feedback = outcome.reason or "A Stop hook asked you to continue."
            await self.conv.append(_hook_message(f"[Stop hook] {feedback}"))
            return
        raise RunEnded(ExecutionStatus.FINISHED)


async def run(conv: Conversation) -> None:
    runtime = await runtime_for(conv)
    view = await view_for(conv, runtime)
    await Run(conv, runtime, view)()


async def runtime_for(conv: Conversation) -> Runtime:
    """The conversation's runtime, made on first use; its MCP servers started (again)."""
    if conv.runtime is None:
        conv.runtime = Runtime(conv)
    errors = await conv.runtime.start()
    if errors:
        await conv.append(*errors)
    return conv.runtime


async def view_for(conv: Conversation, runtime: Runtime) -> View:
    """The runtime's view of the log, made (once) knowing whether the model reads images."""
    if runtime.view is None:
        runtime.ctx.vision = await _vision(conv)
    return await runtime.attach(conv, vision=runtime.ctx.vision)


async def pending_actions(conv: Conversation, view: View) -> list[tuple[ActionEvent, str | None]]:
    """The stored ActionEvents still waiting for a result, in call order."""
    log = await conv.log()
    out: list[tuple[ActionEvent, str | None]] = []
    for pending in list(view.pending.values()):
        line = log.get(pending.action_id)
        event = parse_event(line) if line is not None else None
        if isinstance(event, ActionEvent):
            out.append((event, None if event.action is not None else "Not executable."))
    return out


async def repair(conv: Conversation, view: View, why: str) -> None:
    """Give every tool call still without a result an AgentErrorEvent."""
    await (await conv.log()).drain()  # a result being written now counts: no second one
    errors = [AgentErrorEvent(tool_name=p.tool_name, tool_call_id=p.tool_call_id, error=why)
              for p in view.pending.values()]
    if errors:
        await conv.append(*errors)


def _action_event(runtime: Runtime, reply: llm.Completion, call: llm.ToolCall, first: bool,
                  thinking: list[Any]) -> tuple[ActionEvent, str | None]:
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
    tool = runtime.tools.get(call.name)
    if problem is None and tool is None:
        problem = f"Unknown tool {call.name!r}. Available tools: {', '.join(runtime.tools)}."
    elif problem is None and tool is not None:
        try:
            action = tool.parse(args)
        except ValidationError as exc:
            problem = f"Invalid arguments for {call.name}: {_validation_text(exc)}"
    event = ActionEvent(
        thought=[TextContent(text=reply.content)] if first and reply.content else [],
        reasoning_content=reply.reasoning_content if first else None,
        thinking_blocks=thinking if first else [],
        action=action,
        tool_name=call.name,
        tool_call_id=call.id,
        tool_call=MessageToolCall(id=call.id, name=call.name, arguments=call.arguments,
                                  origin="completion"),
        llm_response_id=reply.response_id,
        security_risk=risk,
        summary=summary,
    )
    return event, problem


def _hook_message(text: str) -> MessageEvent:
    """What a hook tells the model, as a user-role message from the hook."""
    return MessageEvent(source="hook", llm_message=Message(role="user",
                                                           content=[TextContent(text=text)]))


def _acts(runtime: Runtime, name: str) -> bool:
    tool = runtime.tools.get(name)
    return True if tool is None else tool.acts


def _arguments(event: ActionEvent) -> Any:
    try:
        return json.loads(event.tool_call.arguments)
    except ValueError:
        return event.tool_call.arguments


def _error(event: ActionEvent, message: str) -> AgentErrorEvent:
    return AgentErrorEvent(tool_name=event.tool_name, tool_call_id=event.tool_call_id,
                           error=message)


def _outcome(result: Event) -> str:
    if isinstance(result, ObservationEvent):
        return result.observation.model_dump_json()
    return getattr(result, "error", "") or getattr(result, "rejection_reason", "")


def _validation_text(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def _thinking_block(block: dict[str, Any]) -> ThinkingBlock | RedactedThinkingBlock:
    if block.get("type") == "redacted_thinking":
        return RedactedThinkingBlock(data=str(block.get("data", "")))
    return ThinkingBlock(thinking=str(block.get("thinking", "")), signature=block.get("signature"))


def _delta(conv: Conversation, text: str | None, reasoning: str | None) -> None:
    if text or reasoning:
        conv.publish_transient(StreamingDeltaEvent(content=text, reasoning_content=reasoning))


async def _record_usage(conv: Conversation, reply: llm.Completion) -> None:
    metrics = conv.record.metrics
    usage, total = reply.usage, metrics.accumulated_token_usage
    metrics.model_name = usage.model or metrics.model_name
    metrics.accumulated_cost += reply.cost
    metrics.response_count += 1
    metrics.total_latency += reply.latency
    for name in ("prompt_tokens", "completion_tokens", "cache_read_tokens", "cache_write_tokens",
                 "reasoning_tokens"):
        setattr(total, name, getattr(total, name) + getattr(usage, name))
    total.per_turn_token = usage.per_turn_token
    total.response_id = usage.response_id
    total.model = usage.model
    await conv.append(ConversationStateUpdateEvent(key="stats", value={
        "usage_to_metrics": {conv.record.agent.llm.usage_id: metrics.model_dump(mode="json")},
        "last_response": {**usage.model_dump(mode="json"), "cost": reply.cost,
                          "latency": reply.latency},
    }))


async def _vision(conv: Conversation) -> bool:
    config = conv.record.agent.llm
    if config.vision is not None:
        return config.vision
    litellm = await llm.load()
    try:
        return bool(litellm.supports_vision(model=config.model))
    except Exception:
        return False
