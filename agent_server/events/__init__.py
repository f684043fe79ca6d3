"""The event schema of SPEC 6: shared content types and the 19 event kinds.

The kinds are loaded on first use: their Action and Observation unions are built from the
tools, and the tools import the content types from here, so importing eagerly would go round
in a circle.
"""

import importlib
from typing import Any

from agent_server.events.content import (
    AnyThinkingBlock,
    Content,
    CriticResult,
    ImageContent,
    Message,
    MessageToolCall,
    ReasoningItemModel,
    RedactedThinkingBlock,
    SecurityRisk,
    Strict,
    TextContent,
    ThinkingBlock,
    ToolAnnotations,
    ToolDefinition,
)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    kinds = importlib.import_module("agent_server.events.kinds")
    try:
        return getattr(kinds, name)
    except AttributeError:
        raise AttributeError(f"module 'agent_server.events' has no attribute {name!r}") from None


__all__ = [
    "AnyThinkingBlock",
    "Content",
    "CriticResult",
    "ImageContent",
    "Message",
    "MessageToolCall",
    "ReasoningItemModel",
    "RedactedThinkingBlock",
    "SecurityRisk",
    "Strict",
    "TextContent",
    "ThinkingBlock",
    "ToolAnnotations",
    "ToolDefinition",
]
