"""The event schema of SPEC 6: shared content types and the 19 event kinds.

The content types live in `core.content` (the tools and the control plane use them too) and
are re-exported here. The kinds are loaded on first use: their Action and Observation unions
are built from the tools, so importing them here would load every tool with this package.
"""

import importlib
from typing import Any

from core.content import (
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
