"""The event schema of SPEC 6: shared content types and the 19 event kinds."""

from agent_server.events.content import *  # noqa: F403
from agent_server.events.kinds import *  # noqa: F403
from agent_server.events.kinds import __all__ as _kinds_all
from agent_server.events.content import (
    Content,
    CriticResult,
    ImageContent,
    Message,
    MessageToolCall,
    ReasoningItemModel,
    RedactedThinkingBlock,
    SecurityRisk,
    TextContent,
    ThinkingBlock,
    ToolDefinition,
)

__all__ = [
    "Content",
    "CriticResult",
    "ImageContent",
    "Message",
    "MessageToolCall",
    "ReasoningItemModel",
    "RedactedThinkingBlock",
    "SecurityRisk",
    "TextContent",
    "ThinkingBlock",
    "ToolDefinition",
    *_kinds_all,
]
