"""The 19 event kinds of SPEC 6.2 and the union discriminated by `kind`.

Field names, types, defaults and required fields follow the SPEC table exactly. The common
fields come first in every kind (id, timestamp, source, parent_id, kind): the event log reads
them off the front of a stored line without parsing the rest.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeAlias, Union

from pydantic import (
    AfterValidator,
    Field,
    TypeAdapter,
)

from events.content import (
    AnyThinkingBlock,
    CriticResult,
    Message,
    MessageToolCall,
    ReasoningItemModel,
    SecurityRisk,
    Strict,
    TextContent,
    ToolDefinition,
)
from events.tools import AnyAction, AnyObservation

Source = Literal["agent", "user", "environment", "hook"]


def format_timestamp(moment: datetime) -> str:
    """The one text form of a timestamp: UTC, microseconds, explicit offset (fixed width)."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def parse_timestamp(text: str) -> datetime:
    """ISO 8601 with an offset ('Z' allowed) -> aware datetime; naive times are refused."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError("timestamp needs a UTC offset, e.g. 2026-01-31T12:00:00+00:00")
    return moment


def _normal_timestamp(text: str) -> str:
    try:
        return format_timestamp(parse_timestamp(text))
    except OverflowError:  # e.g. year 9999 with a negative offset: no UTC form exists
        raise ValueError("timestamp is out of range once converted to UTC") from None


Timestamp = Annotated[str, AfterValidator(_normal_timestamp)]

#: The Action and Observation an event may carry: every tool payload, told apart by `kind`.
ActionUnion: TypeAlias = Annotated[AnyAction, Field(discriminator="kind")]
ObservationUnion: TypeAlias = Annotated[AnyObservation, Field(discriminator="kind")]


class Event(Strict):
    """Common fields of every kind (SPEC 6.1); `id` and `timestamp` are set by the log."""

    id: str | None = None
    timestamp: Timestamp | None = None
    source: Source
    parent_id: str | None = None
    kind: str


class ServerErrorEvent(Event):
    kind: Literal["ServerErrorEvent"] = "ServerErrorEvent"
    code: str
    detail: str


class ACPToolCallEvent(Event):
    source: Source = "agent"
    kind: Literal["ACPToolCallEvent"] = "ACPToolCallEvent"
    tool_call_id: str
    title: str
    status: str | None = None
    tool_kind: str | None = None
    raw_input: Any = None
    raw_output: Any = None
    content: list[Any] | None = None
    is_error: bool = False


def _unique(ids: list[str]) -> list[str]:
    if len(set(ids)) != len(ids):
        raise ValueError("forgotten_event_ids must not repeat an id")
    return ids


class Condensation(Event):
    source: Source = "environment"
    kind: Literal["Condensation"] = "Condensation"
    forgotten_event_ids: Annotated[list[str], AfterValidator(_unique)] = Field(default_factory=list)
    summary: str | None = None
    summary_offset: Annotated[int, Field(ge=0)] | None = None
    llm_response_id: str


class CondensationRequest(Event):
    source: Source = "environment"
    kind: Literal["CondensationRequest"] = "CondensationRequest"


class CondensationSummaryEvent(Event):
    source: Source = "environment"
    kind: Literal["CondensationSummaryEvent"] = "CondensationSummaryEvent"
    summary: str


class ConversationErrorEvent(Event):
    kind: Literal["ConversationErrorEvent"] = "ConversationErrorEvent"
    code: str
    detail: str


class ConversationStateUpdateEvent(Event):
    source: Source = "environment"
    kind: Literal["ConversationStateUpdateEvent"] = "ConversationStateUpdateEvent"
    key: str = "full_state"
    value: Any = None


HookEventType = Literal[
    "PreToolUse", "PostToolUse", "UserPromptSubmit", "SessionStart", "SessionEnd", "Stop"
]


class HookExecutionEvent(Event):
    source: Source = "hook"
    kind: Literal["HookExecutionEvent"] = "HookExecutionEvent"
    hook_event_type: HookEventType
    hook_command: str
    tool_name: str | None = None
    success: bool
    blocked: bool = False
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    reason: str | None = None
    additional_context: str | None = None
    error: str | None = None
    action_id: str | None = None
    message_id: str | None = None
    hook_input: dict[str, Any] | None = None


class LLMCompletionLogEvent(Event):
    source: Source = "environment"
    kind: Literal["LLMCompletionLogEvent"] = "LLMCompletionLogEvent"
    filename: str
    log_data: str
    model_name: str = "unknown"
    usage_id: str = "default"


class ActionEvent(Event):
    source: Source = "agent"
    kind: Literal["ActionEvent"] = "ActionEvent"
    thought: list[TextContent]
    reasoning_content: str | None = None
    thinking_blocks: list[AnyThinkingBlock] = Field(default_factory=list)
    responses_reasoning_item: ReasoningItemModel | None = None
    action: ActionUnion | None = None
    tool_name: str
    tool_call_id: str
    tool_call: MessageToolCall
    llm_response_id: str
    security_risk: SecurityRisk = SecurityRisk.UNKNOWN
    critic_result: CriticResult | None = None
    summary: str | None = None


class MessageEvent(Event):
    kind: Literal["MessageEvent"] = "MessageEvent"
    llm_message: Message
    llm_response_id: str | None = None
    activated_skills: list[str] = Field(default_factory=list)
    extended_content: list[TextContent] = Field(default_factory=list)
    sender: str | None = None
    critic_result: CriticResult | None = None


class AgentErrorEvent(Event):
    source: Source = "agent"
    kind: Literal["AgentErrorEvent"] = "AgentErrorEvent"
    tool_name: str
    tool_call_id: str
    error: str


class ObservationEvent(Event):
    source: Source = "environment"
    kind: Literal["ObservationEvent"] = "ObservationEvent"
    tool_name: str
    tool_call_id: str
    observation: ObservationUnion
    action_id: str
    extended_content: list[TextContent] = Field(default_factory=list)


class UserRejectObservation(Event):
    source: Source = "environment"
    kind: Literal["UserRejectObservation"] = "UserRejectObservation"
    tool_name: str
    tool_call_id: str
    action_id: str
    rejection_reason: str = "User rejected the action"
    rejection_source: Literal["user", "hook"] = "user"


class SystemPromptEvent(Event):
    source: Source = "agent"
    kind: Literal["SystemPromptEvent"] = "SystemPromptEvent"
    system_prompt: TextContent
    tools: list[ToolDefinition]
    dynamic_context: TextContent | None = None


class StreamingDeltaEvent(Event):
    source: Source = "agent"
    kind: Literal["StreamingDeltaEvent"] = "StreamingDeltaEvent"
    content: str | None = None
    reasoning_content: str | None = None
    #: A running tool's output so far (the terminal's lines as they come), on the same
    #: transient path as the model's text: never stored, the observation holds it once. Ours,
    #: not SPEC 6.2's: left out of the JSON when null, and sent only to sockets that ask for
    #: them (`progress=true`), so a client validating the SPEC's shape never sees them.
    tool_call_id: str | None = Field(default=None, exclude_if=lambda value: value is None)
    output: str | None = Field(default=None, exclude_if=lambda value: value is None)


class TokenEvent(Event):
    kind: Literal["TokenEvent"] = "TokenEvent"
    prompt_token_ids: list[int]
    response_token_ids: list[int]


class InterruptEvent(Event):
    source: Source = "user"
    kind: Literal["InterruptEvent"] = "InterruptEvent"


class PauseEvent(Event):
    source: Source = "user"
    kind: Literal["PauseEvent"] = "PauseEvent"


KINDS: tuple[type[Event], ...] = (
    ServerErrorEvent,
    ACPToolCallEvent,
    Condensation,
    CondensationRequest,
    CondensationSummaryEvent,
    ConversationErrorEvent,
    ConversationStateUpdateEvent,
    HookExecutionEvent,
    LLMCompletionLogEvent,
    ActionEvent,
    MessageEvent,
    AgentErrorEvent,
    ObservationEvent,
    UserRejectObservation,
    SystemPromptEvent,
    StreamingDeltaEvent,
    TokenEvent,
    InterruptEvent,
    PauseEvent,
)
KIND_NAMES: tuple[str, ...] = tuple(k.__name__ for k in KINDS)
KindName = Literal[KIND_NAMES]  # type: ignore[valid-type]

AnyEvent = Annotated[Union[KINDS], Field(discriminator="kind")]  # type: ignore[valid-type]  # noqa: UP007
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(AnyEvent)
EVENT_LIST_ADAPTER: TypeAdapter[list[Event]] = TypeAdapter(list[AnyEvent])


def parse_event(data: bytes | str | dict[str, Any]) -> Event:
    """JSON text or a dict -> the event model of its kind (ValidationError otherwise)."""
    if isinstance(data, dict):
        return EVENT_ADAPTER.validate_python(data)
    return EVENT_ADAPTER.validate_json(data)


__all__ = [
    "KINDS",
    "KIND_NAMES",
    "AnyEvent",
    "Event",
    "EVENT_ADAPTER",
    "EVENT_LIST_ADAPTER",
    "KindName",
    "Source",
    "Timestamp",
    "format_timestamp",
    "parse_event",
    "parse_timestamp",
    *KIND_NAMES,
]
