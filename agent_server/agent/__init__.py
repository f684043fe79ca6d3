"""The agent: what a conversation runs. `open_conversation` writes its first event,
`run` is the loop, `check_tools` refuses tool names nobody knows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_server.agent import llm
from agent_server.agent.loop import run, runtime_for
from agent_server.agent.prompt import SYSTEM_PROMPT, dynamic_context
from agent_server.agent.runtime import check_tools
from agent_server.events import SystemPromptEvent, TextContent

if TYPE_CHECKING:
    from agent_server.conversations import Conversation


async def open_conversation(conv: Conversation) -> None:
    """The first event: the SystemPromptEvent, listing exactly the tools the agent has."""
    runtime = await runtime_for(conv)
    definitions = runtime.definitions()
    await conv.append(SystemPromptEvent(
        system_prompt=TextContent(text=SYSTEM_PROMPT),
        tools=definitions,
        dynamic_context=TextContent(
            text=dynamic_context(conv.working_dir, [d.title for d in definitions])),
    ))
    llm.prewarm()


__all__ = ["check_tools", "open_conversation", "run"]
