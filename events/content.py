"""The shared component types of SPEC 2.7: message content, tool calls and their neighbours.

They are the wire contract's leaves, apart from the event kinds that carry them: the tools'
payloads, the agent server, the control plane and the editor bridge all speak them through
`events`, which imports nothing of theirs.

Every model forbids unknown fields: events never carry them, and these types only travel
inside events.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    """Base of every schema model: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class TextContent(Strict):
    cache_prompt: bool = False
    type: Literal["text"] = "text"
    text: str


class ImageContent(Strict):
    """An image given to a vision-capable model: URLs (http or data:) as OpenHands does."""

    cache_prompt: bool = False
    type: Literal["image"] = "image"
    image_urls: list[str]


Content = Annotated[TextContent | ImageContent, Field(discriminator="type")]


def text_of(content: Iterable[object]) -> str:
    """The text of a message's (or an observation's) content, one item per line; images are
    left out. The one way the server reads content as plain text (the OpenHands SDK joins
    content with newlines too), so hooks, skills, critics and the model read the same."""
    return "\n".join(item.text for item in content if isinstance(item, TextContent))


class ThinkingBlock(Strict):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(Strict):
    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


AnyThinkingBlock = Annotated[ThinkingBlock | RedactedThinkingBlock, Field(discriminator="type")]


class ReasoningItemModel(Strict):
    """A reasoning item of a responses-style API; `encrypted_content` is never logged."""

    id: str | None = None
    summary: list[str] = Field(default_factory=list)
    content: list[str] | None = None
    encrypted_content: str | None = None
    status: str | None = None


class MessageToolCall(Strict):
    id: str
    responses_item_id: str | None = None
    name: str
    arguments: str
    origin: Literal["completion", "responses"]


class SecurityRisk(str, Enum):
    """Ordered from UNKNOWN to HIGH; `rank` gives the order for threshold checks."""

    UNKNOWN = "UNKNOWN"
    LOW = "LOW"
    MEDIUM = "MEDIUM"
    HIGH = "HIGH"

    @property
    def rank(self) -> int:
        return list(SecurityRisk).index(self)


class CriticResult(Strict):
    score: float = Field(ge=0.0, le=1.0)
    message: str | None
    metadata: dict[str, Any] | None = None


class Message(Strict):
    role: Literal["user", "system", "assistant", "tool"]
    content: list[Content] = Field(default_factory=list)
    tool_calls: list[MessageToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    reasoning_content: str | None = None
    thinking_blocks: list[AnyThinkingBlock] = Field(default_factory=list)
    responses_reasoning_item: ReasoningItemModel | None = None


class ToolAnnotations(Strict):
    """MCP-style hints about what a tool does."""

    title: str | None = None
    readOnlyHint: bool = False
    destructiveHint: bool = True
    idempotentHint: bool = False
    openWorldHint: bool = True


class ToolDefinition(Strict):
    """A tool as the SystemPromptEvent lists it: `title` names it (SPEC 2.7 and 4.4).

    Shaped like the OpenHands agent server's tool dump (kind, action and observation kinds,
    MCP-style annotations) plus the JSON schema of the arguments the model was given.
    """

    kind: str
    title: str
    description: str
    action_type: str
    observation_type: str | None = None
    parameters: dict[str, Any]
    annotations: ToolAnnotations | None = None
    meta: dict[str, Any] | None = None


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
    "text_of",
]
