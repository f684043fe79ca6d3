"""A conversation's stored record (meta.json) and the requests that make or feed one."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import BaseModel, Field, StringConstraints, field_validator

from agent_server.agent.spec import (
    AgentSpec,
    ConfirmationPolicy,
    EnvName,
    ExecutionStatus,
    HookConfig,
    Lenient,
    Metrics,
    NeverConfirm,
    RepositorySpec,
    RepositoryStatus,
    SecretText,
)
from agent_server.events import ImageContent, TextContent


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


SecretValue = SecretText | StaticSecret
#: A conversation's secrets as a request gives them: names are environment names.
Secrets = Annotated[dict[EnvName, SecretValue], Field(max_length=200)]
#: Tags: up to 50, keys 1 to 50 of a-z, 0-9, _ and -, values up to 256 characters.
TAG_KEY = r"^[a-z0-9_-]{1,50}$"
Tags = Annotated[dict[Annotated[str, StringConstraints(pattern=TAG_KEY)],
                      Annotated[str, StringConstraints(max_length=256)]], Field(max_length=50)]


def secret_values(secrets: dict[str, SecretValue]) -> dict[str, str]:
    return {k: v if isinstance(v, str) else v.value for k, v in secrets.items()}


class CreateConversation(Lenient):
    agent: AgentSpec | None = None
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
    agent: AgentSpec
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
    created_at: datetime
    updated_at: datetime


class ConversationSearch(Lenient):
    limit: int = Field(default=100, ge=1, le=100)
    page_id: UUID | None = None
    status: ExecutionStatus | None = None
    sort_order: Literal["CREATED_AT", "CREATED_AT_DESC", "UPDATED_AT", "UPDATED_AT_DESC"] = (
        "CREATED_AT_DESC"
    )
