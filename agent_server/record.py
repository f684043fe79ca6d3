"""A conversation's stored record (meta.json) and the requests that make or feed one."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import httpx
from pydantic import BaseModel, Discriminator, Field, StringConstraints, Tag

from agent_server.agent.policies import ConfirmationPolicy, HookConfig, NeverConfirm
from agent_server.agent.spec import (
    ACPAgentSpec,
    AgentSpec,
    AnyAgentSpec,
    EnvName,
    Lenient,
    SecretText,
)
from agent_server.agent.usage import Metrics
from agent_server.repository import RepositorySpec, RepositoryStatus
from agent_server.telemetry.tracing import TraceRef
from core import observability
from events import ImageContent, TextContent
from events.status import ExecutionStatus
from web.errors import invalid


class Workspace(Lenient):
    kind: Literal["LocalWorkspace"] = "LocalWorkspace"
    working_dir: str = Field(min_length=1, max_length=4096, pattern=r"^/[^\x00]*$")
    """An absolute path; created when missing."""


class RequestText(Lenient):
    type: Literal["text"] = "text"
    text: str = Field(max_length=1_000_000)
    cache_prompt: bool = False


class RequestImage(Lenient):
    type: Literal["image"]
    image_urls: list[str] = Field(min_length=1, max_length=20)


class SendMessage(Lenient):
    """POST /api/conversations/{id}/events, and `initial_message` at creation."""

    role: Literal["user"] = "user"
    content: list[RequestText | RequestImage] = Field(min_length=1, max_length=100)
    run: bool = False
    sender: str | None = Field(default=None, max_length=200)

    def contents(self) -> list[TextContent | ImageContent]:
        out: list[TextContent | ImageContent] = []
        for item in self.content:
            if isinstance(item, RequestText):
                out.append(TextContent(text=item.text, cache_prompt=item.cache_prompt))
            else:
                out.append(ImageContent(image_urls=item.image_urls))
        return out


class StaticSecret(Lenient):
    """OpenHands' object form of a secret value."""

    kind: Literal["StaticSecret"] = "StaticSecret"
    value: SecretText


class LookupSecret(Lenient):
    """OpenHands' secret found at a URL (an HTTP GET with `headers`: what the Cloud workspace's
    `get_secrets()` hands out, pointing at the control plane's sandbox-scoped secrets). Fetched
    once, when it is given, and kept as its value: neither the URL nor its headers (a session
    key) are stored."""

    kind: Literal["LookupSecret"]
    """Required (the SDK always sends it): an object without it is a StaticSecret."""
    url: str = Field(pattern=r"^https?://", max_length=2000)
    headers: dict[
        Annotated[str, Field(max_length=200)], Annotated[str, Field(max_length=10_000)]
    ] = Field(default_factory=dict, max_length=20)
    description: str | None = Field(default=None, max_length=1000)


def _secret_form(value: Any) -> str:
    if isinstance(value, str):
        return "str"
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return "LookupSecret" if kind == "LookupSecret" else "StaticSecret"


#: A secret's value, text or OpenHands' object forms (one error for a bad one, not one per form).
SecretValue = Annotated[
    Annotated[SecretText, Tag("str")]
    | Annotated[StaticSecret, Tag("StaticSecret")]
    | Annotated[LookupSecret, Tag("LookupSecret")],
    Discriminator(_secret_form),
]
#: Seconds, and bytes, a LookupSecret's answer may take.
LOOKUP_TIMEOUT = 10.0
LOOKUP_MAX_BYTES = 65536
#: A conversation's secrets as a request gives them: names are environment names.
Secrets = Annotated[dict[EnvName, SecretValue], Field(max_length=200)]
#: Tags: up to 50, keys 1 to 50 of a-z, 0-9, _ and -, values up to 256 characters.
TAG_KEY = r"^[a-z0-9_-]{1,50}$"
Tags = Annotated[
    dict[
        Annotated[str, StringConstraints(pattern=TAG_KEY)],
        Annotated[str, StringConstraints(max_length=256)],
    ],
    Field(max_length=50),
]


async def secret_values(secrets: dict[str, SecretValue]) -> dict[str, str]:
    """Every secret's value; LookupSecrets are fetched (concurrently). One that cannot be
    fetched is InvalidInput at ["secrets", name], saying why (never the headers)."""

    async def fetch(name: str, lookup: LookupSecret) -> str:
        try:
            async with httpx.AsyncClient(timeout=LOOKUP_TIMEOUT, follow_redirects=False) as http:
                async with http.stream("GET", lookup.url, headers=lookup.headers) as response:
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > LOOKUP_MAX_BYTES:
                            raise invalid(
                                ["secrets", name],
                                f"the LookupSecret is over {LOOKUP_MAX_BYTES} bytes",
                            )
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:  # a bad URL or header
            raise invalid(
                ["secrets", name], f"the LookupSecret could not be fetched: {type(exc).__name__}"
            ) from None
        if response.status_code != 200:
            raise invalid(
                ["secrets", name],
                f"the LookupSecret could not be fetched: HTTP {response.status_code}",
            )
        return body.decode(errors="replace")

    looked = {k: v for k, v in secrets.items() if isinstance(v, LookupSecret)}
    found = dict(
        zip(looked, await asyncio.gather(*(fetch(k, v) for k, v in looked.items())), strict=True)
    )
    for name, value in secrets.items():
        if isinstance(value, str):
            found[name] = value
        elif isinstance(value, StaticSecret):
            found[name] = value.value
    return {name: found[name] for name in secrets}


#: A dotted Python module name.
MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,20}$")
ModuleName = Annotated[str, StringConstraints(pattern=MODULE.pattern)]


class CreateConversation(Lenient):
    agent: AnyAgentSpec | None = None
    workspace: Workspace | None = None
    initial_message: SendMessage | None = None
    conversation_id: UUID | None = None
    max_iterations: int = Field(default=500, ge=1, le=100_000)
    stuck_detection: bool = True
    title: str | None = Field(default=None, max_length=200)
    tags: Tags = Field(default_factory=dict)
    secrets: Secrets = Field(default_factory=dict)
    repository: RepositorySpec | None = None
    """Cloned (shallow) into the working directory before the first step (SPEC 2.5)."""
    confirmation_policy: ConfirmationPolicy = Field(default_factory=NeverConfirm)
    hook_config: HookConfig | None = None
    parent_conversation_id: UUID | None = None
    """The conversation that owns this one (a sub-agent's parent); it must exist."""
    client_tools: list[dict[str, Any]] = Field(default_factory=list, max_length=50)
    """OpenHands SDK client tools (specs kept and shown, so that a client re-attaching can
    register their action types; this server never runs them)."""
    tool_module_qualnames: dict[Annotated[str, Field(max_length=200)], ModuleName] = Field(
        default_factory=dict, max_length=100
    )
    """OpenHands SDK tool name -> module, kept and shown for clients that re-attach."""
    observability_span_name: observability.SpanName | None = None
    """SPEC 2.5: a named child span under the conversation's root span (stable, low-cardinality)."""
    observability_tags: observability.Tags = Field(default_factory=list)
    """SPEC 2.5: tags added to the conversation's root span."""
    observability_metadata: observability.Metadata = Field(default_factory=dict)
    """SPEC 2.5: trace-level attributes (scalars, or homogeneous arrays of scalars)."""


class ForkRequest(Lenient):
    """POST /api/conversations/{id}/fork."""

    id: UUID | None = None
    """The fork's id (a new one when left out); 409 when it is taken."""
    title: str | None = Field(default=None, max_length=200)
    tags: dict[str, str] | None = Field(default=None, max_length=50)
    reset_metrics: bool = True
    """The fork's LLM totals start at zero (else the source's are copied)."""
    from_event_id: str | None = Field(default=None, max_length=100)
    """Copy only the branch from the root to this event, and put HEAD there (404 if unknown)."""


class WebhookStatus(BaseModel):
    """How far the webhook push of one conversation has got: its lag, never a loss."""

    delivered_through: str | None = None
    """Id of the last event the receiver acknowledged (null: none yet)."""
    pending: int = 0
    """Stored events not acknowledged yet."""
    last_error: str | None = None
    """Why the last attempt failed, while failing (null once a batch gets through)."""
    last_attempt: datetime | None = None
    """When the last request was sent."""


class WebhookTotals(BaseModel):
    """The webhook push of all conversations, for /server_info."""

    conversations: int = 0
    behind: int = 0
    """Conversations with events not acknowledged yet."""
    pending: int = 0
    failing: int = 0
    """Conversations whose last attempt failed."""
    last_error: str | None = None
    """The most recent of their errors."""


class StoredConversation(BaseModel):
    """What meta.json holds (mode 0600: it includes the LLM key)."""

    id: UUID
    agent: AnyAgentSpec
    workspace: Workspace
    execution_status: ExecutionStatus = ExecutionStatus.IDLE
    max_iterations: int = 500
    stuck_detection: bool = True
    title: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    metrics: Metrics = Field(default_factory=Metrics)
    secrets: dict[str, str] = Field(default_factory=dict)
    repository: RepositorySpec | None = None
    repository_status: RepositoryStatus | None = None
    """None until the first run tries the clone (agent_server.repository)."""
    confirmation_policy: ConfirmationPolicy = Field(default_factory=NeverConfirm)
    hook_config: HookConfig | None = None
    parent_conversation_id: UUID | None = None
    """Set for a sub-agent: the conversation whose task, delegate or workflow call made it."""
    llm_profile: str | None = None
    """The saved LLM profile in force (None: the agent's own LLM, `agent.llm`)."""
    security_analyzer: dict[str, Any] | None = None
    """Kept and shown (OpenHands SDK shape, e.g. {"kind": "LLMSecurityAnalyzer"}); the model
    rates each action's risk itself (security_risk), which ConfirmRisky reads."""
    client_tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_module_qualnames: dict[str, str] = Field(default_factory=dict)
    head_event_id: str | None = None
    head_set_at: int | None = None
    """Where the last navigate put HEAD and how long the log was then (None: never moved)."""
    forked_from_conversation_id: UUID | None = None
    forked_from_event_id: str | None = None
    observability_span_name: str | None = None
    observability_tags: list[str] = Field(default_factory=list)
    observability_metadata: dict[str, Any] = Field(default_factory=dict)
    trace: TraceRef | None = None
    """The conversation's trace (None: not traced)."""
    created_at: datetime
    updated_at: datetime

    @classmethod
    def new(
        cls,
        conversation_id: UUID,
        request: CreateConversation,
        *,
        agent: AgentSpec | ACPAgentSpec,
        workspace: Workspace,
        secrets: dict[str, str],
        at: datetime,
    ) -> StoredConversation:
        """A new conversation's record: what the request asks for, with the agent, workspace
        and secret values the catalogue settled on (the request may leave them out)."""
        return cls(
            id=conversation_id,
            agent=agent,
            workspace=workspace,
            max_iterations=request.max_iterations,
            stuck_detection=request.stuck_detection,
            title=request.title,
            tags=request.tags,
            secrets=secrets,
            repository=request.repository,
            confirmation_policy=request.confirmation_policy,
            hook_config=request.hook_config,
            parent_conversation_id=request.parent_conversation_id,
            observability_span_name=request.observability_span_name,
            observability_tags=request.observability_tags,
            observability_metadata=request.observability_metadata,
            created_at=at,
            updated_at=at,
        )

    def forked(
        self,
        fork_id: UUID,
        request: ForkRequest,
        *,
        head: str | None,
        head_set_at: int,
        at: datetime,
    ) -> StoredConversation:
        """The record of a fork of this conversation: its agent (the LLM key too), workspace
        and settings, resting (idle) with HEAD at `head`; a trace of its own is started."""
        record = self.model_copy(
            deep=True,
            update={
                "id": fork_id,
                "execution_status": ExecutionStatus.IDLE,
                "title": request.title if request.title is not None else self.title,
                "tags": request.tags if request.tags is not None else self.tags,
                "head_event_id": head,
                "head_set_at": head_set_at,
                "forked_from_conversation_id": self.id,
                "forked_from_event_id": request.from_event_id,
                "created_at": at,
                "updated_at": at,
                "trace": None,
            },
        )
        if request.reset_metrics:
            record.metrics = Metrics()
        return record


class ConversationSearch(Lenient):
    limit: int = Field(default=100, ge=1, le=100)
    page_id: UUID | None = None
    status: ExecutionStatus | None = None
    parent_conversation_id: UUID | None = None
    """Only the sub-agents of this conversation."""
    sort_order: Literal["CREATED_AT", "CREATED_AT_DESC", "UPDATED_AT", "UPDATED_AT_DESC"] = (
        "CREATED_AT_DESC"
    )


class ConversationInfo(BaseModel):
    """A conversation as the API returns it (and as the `full_state` websocket frame holds it):
    our fields plus those of the OpenHands SDK's ConversationInfo; the LLM key never included."""

    id: UUID
    agent: dict[str, Any]
    """In the shape the OpenHands SDK validates (`AgentBase`), secrets masked."""
    workspace: Workspace
    persistence_dir: str
    """The conversation's own directory on the server (its log and metadata)."""
    execution_status: ExecutionStatus
    max_iterations: int
    stuck_detection: bool
    title: str | None
    tags: dict[str, str]
    metrics: Metrics
    stats: dict[str, Any]
    """`{"usage_to_metrics": {usage_id: metrics}}`, the OpenHands SDK's ConversationStats."""
    secret_names: list[str]
    """Names of the conversation's own secrets; values are never returned."""
    repository: RepositorySpec | None = None
    repository_status: RepositoryStatus | None = None
    confirmation_policy: ConfirmationPolicy
    security_analyzer: dict[str, Any] | None = None
    hook_config: HookConfig | None
    leaf_event_id: str | None = None
    """HEAD of the conversation tree: what the next event hangs off (SPEC 6.1)."""
    head_is_empty: bool = False
    """A navigate chose the empty tree: the next event is a new root."""
    last_user_message_id: str | None = None
    activated_knowledge_skills: list[str] = Field(default_factory=list)
    invoked_skills: list[str] = Field(default_factory=list)
    blocked_actions: dict[str, str] = Field(default_factory=dict)
    blocked_messages: dict[str, str] = Field(default_factory=dict)
    agent_state: dict[str, Any] = Field(default_factory=dict)
    client_tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_module_qualnames: dict[str, str] = Field(default_factory=dict)
    forked_from_conversation_id: UUID | None = None
    forked_from_event_id: str | None = None
    parent_conversation_id: UUID | None = None
    """The conversation that made this one (a sub-agent's parent); null for the others."""
    llm_profile: str | None = None
    """The saved LLM profile in force; null while the agent's own `llm` is."""
    observability_span_name: str | None = None
    observability_tags: list[str] = Field(default_factory=list)
    observability_metadata: dict[str, Any] = Field(default_factory=dict)
    """As given at creation (SPEC 2.5)."""
    trace_id: str | None = None
    """The conversation's trace (W3C trace id, 32 hex digits; null when it is not traced)."""
    created_at: datetime
    updated_at: datetime
    webhook: WebhookStatus | None = None
    """The webhook push of this conversation (null when no webhook is configured)."""

    @classmethod
    def of(
        cls,
        record: StoredConversation,
        *,
        directory: str,
        webhook: WebhookStatus | None = None,
        leaf: str | None = None,
        head_is_empty: bool = False,
        last_user_message: str | None = None,
        status: ExecutionStatus | None = None,
    ) -> ConversationInfo:
        data = record.model_dump(
            exclude={"agent", "secrets", "head_event_id", "head_set_at", "trace"}
        )
        if status is not None:
            data["execution_status"] = status
        metrics = {
            **record.metrics.model_dump(mode="json"),
            "costs": [],
            "response_latencies": [],
            "token_usages": [],
        }
        return cls(
            agent=record.agent.redacted(),
            secret_names=sorted(record.secrets),
            persistence_dir=directory,
            stats={"usage_to_metrics": {record.agent.llm.usage_id: metrics}},
            leaf_event_id=leaf,
            head_is_empty=head_is_empty,
            last_user_message_id=last_user_message,
            webhook=webhook,
            trace_id=record.trace.trace_id if record.trace else None,
            **data,
        )
