"""The start request of SPEC 2.5 (body of POST /api/v1/app-conversations), validated."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from control_plane.settings import NAMED, SecretName, SecretText, check_secret_names
from core import observability

REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")
BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]{1,255}(?<![./])$")
DEPLOYMENT_WIDE = (
    "Idle and deletion times are deployment-wide settings of the control plane "
    "(SPEC 8): they cannot be set per conversation"
)


#: Text kept in a column: no NUL, which PostgreSQL's text refuses (SQLite would keep it), so
#: both backends answer the same 422.
NO_NUL = r"^[^\x00]*$"
Title = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=NO_NUL)]


class TextItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"] = "text"
    text: str = Field(max_length=1_000_000)


class InitialMessage(BaseModel):
    role: Literal["user"] = "user"
    content: list[TextItem] = Field(min_length=1, max_length=100)
    run: bool = True
    """Left out, the agent starts, as with the OpenHands app server (whose web frontend never
    sends it); false only stores the message."""


class Plugin(BaseModel):
    """One MCP tool server: `{name, command, args?, env?}` or `{name, url, headers?}`.

    Becomes an entry of the agent server's `mcp_config.mcpServers`; `${NAME}` placeholders are
    filled there from the conversation's secrets before the server is connected (SPEC 5 rule 4).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    command: str | None = Field(default=None, max_length=1000)
    args: list[str] = Field(default_factory=list, max_length=100)
    env: dict[str, str] = Field(default_factory=dict, max_length=100)
    url: str | None = Field(default=None, max_length=2000)
    headers: dict[str, str] = Field(default_factory=dict, max_length=100)

    @model_validator(mode="after")
    def _one_kind(self) -> Plugin:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                "a plugin has either command (a local tool server) or url (a remote one)"
            )
        return self

    def server(self) -> dict[str, Any]:
        if self.command is not None:
            return {"command": self.command, "args": self.args, "env": self.env}
        return {"url": self.url, "headers": self.headers}


#: Fields a client may send as null for "not given" (the web frontend always sends `plugins`).
NULL_IS_DEFAULT = (
    "secrets",
    "plugins",
    "observability_tags",
    "observability_metadata",
    "pr_number",
)


class StartRequest(BaseModel):
    """Unknown fields are ignored (other clients send more: the OpenHands frontend's
    `agent_type`, `suggested_task`, `parent_conversation_id`...); known ones are checked
    strictly, and every optional one takes null for "not given"."""

    initial_message: InitialMessage | None = None
    selected_repository: str | None = Field(
        default=None, max_length=201, pattern=REPOSITORY.pattern
    )
    selected_branch: str | None = Field(default=None, max_length=255)
    sandbox_id: str | None = Field(default=None, min_length=1, max_length=64)
    secrets: Annotated[dict[SecretName, SecretText], NAMED] = Field(default_factory=dict)
    plugins: list[Plugin] = Field(default_factory=list, max_length=20)
    title: Title | None = None
    observability_span_name: observability.SpanName | None = None
    """Stable, low-cardinality: a short identifier, not free text."""
    observability_tags: observability.Tags = Field(default_factory=list)
    observability_metadata: observability.Metadata = Field(default_factory=dict)
    """SPEC 2.5: scalars, or arrays of one scalar type (the agent server's rules exactly)."""
    llm_model: str | None = Field(default=None, min_length=1, max_length=200)
    """The model of this conversation (the user's settings give the key and the address);
    default: the settings' model."""
    trigger: str | None = Field(default=None, pattern=r"^[a-z_]{1,32}$")
    """What started it, as the app server names it (default: `openhands_api`)."""
    pr_number: list[int] = Field(default_factory=list, max_length=100)
    git_provider: str | None = Field(default=None, pattern=r"^[a-z_]{1,32}$")
    public: bool | None = None
    idle_seconds: None = Field(default=None, description=DEPLOYMENT_WIDE)
    """Not settable here (SPEC 8): only null is accepted."""
    deletion_seconds: None = Field(default=None, description=DEPLOYMENT_WIDE)
    """Not settable here (SPEC 8): only null is accepted."""

    @model_validator(mode="before")
    @classmethod
    def _nulls(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(data.get(k, 0) is None for k in NULL_IS_DEFAULT):
            return {k: v for k, v in data.items() if not (k in NULL_IS_DEFAULT and v is None)}
        return data

    @field_validator("idle_seconds", "deletion_seconds", mode="before")
    @classmethod
    def _deployment_wide(cls, value: Any) -> None:
        if value is not None:
            raise ValueError(DEPLOYMENT_WIDE)
        return None

    @field_validator("selected_repository")
    @classmethod
    def _repository(cls, value: str | None) -> str | None:
        if value is not None and not REPOSITORY.match(value):
            raise ValueError("selected_repository is <organization>/<repository>")
        return value

    @field_validator("selected_branch")
    @classmethod
    def _branch(cls, value: str | None) -> str | None:
        if value is not None and (not BRANCH.match(value) or value.endswith(".lock")):
            raise ValueError("selected_branch is not a valid Git branch name")
        return value

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, value: dict[str, str]) -> dict[str, str]:
        check_secret_names(value)
        return value

    @model_validator(mode="after")
    def _branch_needs_repository(self) -> StartRequest:
        if self.selected_branch and not self.selected_repository:
            raise ValueError("selected_branch needs selected_repository")
        return self
