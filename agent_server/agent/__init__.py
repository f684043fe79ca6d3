"""The agent: what a conversation runs (the Agent interface of agent_server.conversations).

`open_conversation` writes its first event, `run` is the loop, `check_tools` refuses tool
names nobody knows, and the rest handle user messages, confirmations and the end of a session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_server.agent import llm, skills
from agent_server.agent.hooks import run_hooks
from agent_server.agent.loop import pending_actions, run, runtime_for, view_for
from agent_server.agent.prompt import SYSTEM_PROMPT, dynamic_context
from agent_server.agent.runtime import Runtime, check_tools
from agent_server.events import MessageEvent, SystemPromptEvent, TextContent, UserRejectObservation

if TYPE_CHECKING:
    from agent_server.conversations import Conversation


async def open_conversation(conv: Conversation) -> None:
    """The first event: the SystemPromptEvent, listing exactly the tools the agent has.

    MCP servers start first (their tools are listed); a server that fails is reported by a
    ServerErrorEvent right after the SystemPromptEvent.
    """
    if conv.runtime is None:
        conv.runtime = Runtime(conv)
    runtime: Runtime = conv.runtime
    errors = await runtime.start()
    definitions = runtime.definitions()
    await conv.append(SystemPromptEvent(
        system_prompt=TextContent(text=SYSTEM_PROMPT),
        tools=definitions,
        dynamic_context=TextContent(
            text=dynamic_context(conv.working_dir, [d.title for d in definitions],
                                 runtime.skills.skills if runtime.skills else ())),
    ))
    if errors:
        await conv.append(*errors)
    llm.prewarm()


def prepare_user_message(conv: Conversation, event: MessageEvent) -> None:
    """A message containing a skill's trigger activates it: named, and its body carried."""
    text = "\n".join(c.text for c in event.llm_message.content if isinstance(c, TextContent))
    for skill, trigger in skills.book_for(conv).activate(text):
        event.activated_skills.append(skill.name)
        event.extended_content.append(skills.activation_text(skill, trigger))


async def on_user_message(conv: Conversation, event: MessageEvent) -> bool:
    text = "\n".join(c.text for c in event.llm_message.content if isinstance(c, TextContent))
    outcome = await run_hooks(conv, "UserPromptSubmit", message_id=event.id,
                              details={"message": text, "prompt": text})
    return outcome.blocked


async def reject_pending(conv: Conversation, reason: str) -> None:
    """A UserRejectObservation for each action waiting for confirmation."""
    view = await view_for(conv, await runtime_for(conv))
    rejections = [
        UserRejectObservation(tool_name=event.tool_name, tool_call_id=event.tool_call_id,
                              action_id=event.id or "", rejection_reason=reason)
        for event, _ in await pending_actions(conv, view)
    ]
    if rejections:
        await conv.append(*rejections)


async def close(conv: Conversation) -> None:
    runtime = conv.runtime
    if runtime is None:
        return
    if runtime.session_started:
        runtime.session_started = False
        await run_hooks(conv, "SessionEnd")
    await runtime.close()


__all__ = [
    "check_tools",
    "close",
    "on_user_message",
    "open_conversation",
    "prepare_user_message",
    "reject_pending",
    "run",
]
