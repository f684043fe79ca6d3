"""Request and response bodies of the HTTP interface (SPEC 2.6, 4.4).

Requests tolerate unknown fields (clients of other servers send more); responses and stored
records are exact. Shapes follow the public OpenHands agent server where the SPEC is silent.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
import re
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_serializer,
    field_validator,
    model_validator,
)

from agent_server.events import ImageContent, TextContent
from agent_server.events.kinds import KindName
from core.ids import ENV_NAME, EVENT_ID_PATTERN, PLACEHOLDER
from core.masking import REDACTED


class Lenient(BaseModel):
    """Request models: unknown fields are ignored, not refused."""

    model_config = ConfigDict(extra="ignore")


class ExecutionStatus(str, Enum):
    """SPEC 3.2, lowercase as the agent server returns it."""

    IDLE = "idle"
    RUNNING = "running"
    PAUSED = "paused"
    WAITING_FOR_CONFIRMATION = "waiting_for_confirmation"
    FINISHED = "finished"
    ERROR = "error"
    STUCK = "stuck"


# -- agent specification -------------------------------------------------------------------


class LLMConfig(Lenient):
    model: str = Field(min_length=1, max_length=200)
    api_key: SecretStr | None = None
    base_url: str | None = Field(default=None, max_length=2000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_output_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    timeout: float | None = Field(default=None, gt=0, le=3600)
    num_retries: int = Field(default=5, ge=0, le=20)
    stream: bool = False
    vision: bool | None = None
    """Whether the model reads images; unknown (None) asks litellm's model map."""
    usage_id: str = Field(default="default", max_length=100)

    @field_serializer("api_key", when_used="json")
    def _dump_key(self, key: SecretStr | None) -> str | None:
        # Stored metadata keeps the key (mode 0600); responses go through `redacted()`.
        return None if key is None else key.get_secret_value()


class CondenserConfig(Lenient):
    """When the history is condensed (summarized) to stay inside the model's context window."""

    enabled: bool = True
    max_share: float = Field(default=0.75, gt=0, le=1)
    """Condense when a request's prompt would pass this share of the model's context window."""
    max_tokens: int | None = Field(default=None, ge=500, le=10_000_000)
    """Condense when a request's prompt would pass this many tokens (estimated)."""
    max_events: int | None = Field(default=None, ge=6, le=100_000)
    """Condense when the model's view holds more messages than this."""


class ToolSpec(Lenient):
    name: str = Field(min_length=1, max_length=100)
    params: dict[str, Any] = Field(default_factory=dict)


class AgentSpec(Lenient):
    kind: Literal["Agent"] = "Agent"
    llm: LLMConfig
    tools: list[ToolSpec] = Field(default_factory=list, max_length=50)
    mcp_config: dict[str, Any] | None = None
    """MCP tool servers, `{"mcpServers": {name: {command, args, env} | {url, headers}}}`;
    `${NAME}` placeholders anywhere in it are filled from the conversation's secrets."""
    condenser: CondenserConfig = Field(default_factory=CondenserConfig)

    def redacted(self) -> dict[str, Any]:
        """For responses: the LLM key and literal MCP env and header values masked."""
        data = self.model_dump(mode="json")
        if data["llm"].get("api_key"):
            data["llm"]["api_key"] = REDACTED
        mask_mcp_config(data.get("mcp_config"))
        return data


def mask_mcp_config(config: Any) -> None:
    """Mask, in place, literal env and header values of an mcp_config (for responses)."""
    servers = config.get("mcpServers") if isinstance(config, dict) else None
    if not isinstance(servers, dict):
        return
    for server in servers.values():
        for field in ("env", "headers"):
            values = server.get(field) if isinstance(server, dict) else None
            if isinstance(values, dict):
                server[field] = {k: v if _placeholder_only(v) else REDACTED
                                 for k, v in values.items()}


def _placeholder_only(value: Any) -> bool:
    """`${NAME}` (a reference to a secret) is safe to show; a literal value may not be."""
    return isinstance(value, str) and PLACEHOLDER.fullmatch(value) is not None


class Workspace(Lenient):
    kind: Literal["LocalWorkspace"] = "LocalWorkspace"
    working_dir: str = Field(min_length=1, max_length=4096)

    @field_validator("working_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("working_dir must be an absolute path")
        return value


# -- messages --------------------------------------------------------------------------------


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


# -- confirmation and hooks ------------------------------------------------------------------


class NeverConfirm(Lenient):
    kind: Literal["NeverConfirm"] = "NeverConfirm"


class AlwaysConfirm(Lenient):
    kind: Literal["AlwaysConfirm"] = "AlwaysConfirm"


class ConfirmRisky(Lenient):
    kind: Literal["ConfirmRisky"] = "ConfirmRisky"
    threshold: Literal["LOW", "MEDIUM", "HIGH"] = "HIGH"
    confirm_unknown: bool = True


ConfirmationPolicy = Annotated[NeverConfirm | AlwaysConfirm | ConfirmRisky,
                               Field(discriminator="kind")]


class SetConfirmationPolicy(Lenient):
    """POST .../confirmation_policy: `{"policy": {...}}` (OpenHands) or the policy itself."""

    policy: ConfirmationPolicy

    @model_validator(mode="before")
    @classmethod
    def _bare(cls, data: Any) -> Any:
        if isinstance(data, dict) and "policy" not in data and "kind" in data:
            return {"policy": data}
        return data


class ConfirmationResponse(Lenient):
    """POST .../events/respond_to_confirmation."""

    accept: bool
    reason: str = Field(default="User rejected the action.", max_length=10_000)


class HookDefinition(Lenient):
    type: Literal["command"] = "command"
    command: str = Field(min_length=1, max_length=10_000)
    timeout: float = Field(default=60, gt=0, le=3600)


class HookMatcher(Lenient):
    matcher: str = Field(default="*", max_length=1000)
    """A regular expression on the tool name (PreToolUse, PostToolUse); `*` matches all."""
    hooks: list[HookDefinition] = Field(default_factory=list, max_length=20)

    @field_validator("matcher")
    @classmethod
    def _regex(cls, value: str) -> str:
        if value not in ("", "*"):
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"matcher is not a valid regular expression: {exc}") from None
        return value


HOOK_EVENT_TYPES = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "SessionStart",
                    "SessionEnd", "Stop")


class HookConfig(Lenient):
    """Hooks by event type, in the familiar shape (snake_case keys are accepted too).

    Unknown keys are refused here, unlike elsewhere: a misspelt event type would silently
    leave a safety hook unrun.
    """

    model_config = ConfigDict(extra="forbid")

    PreToolUse: list[HookMatcher] = Field(default_factory=list, max_length=50)
    PostToolUse: list[HookMatcher] = Field(default_factory=list, max_length=50)
    UserPromptSubmit: list[HookMatcher] = Field(default_factory=list, max_length=50)
    SessionStart: list[HookMatcher] = Field(default_factory=list, max_length=50)
    SessionEnd: list[HookMatcher] = Field(default_factory=list, max_length=50)
    Stop: list[HookMatcher] = Field(default_factory=list, max_length=50)

    @model_validator(mode="before")
    @classmethod
    def _names(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if isinstance(data.get("hooks"), dict):  # the {"hooks": {...}} wrapper
                data = data["hooks"]
            snake = {re.sub(r"(?<!^)([A-Z])", r"_\1", n).lower(): n for n in HOOK_EVENT_TYPES}
            data = {snake.get(k, k): v for k, v in data.items()}
        return data

    def matching(self, event_type: str, tool_name: str | None = None) -> list[HookDefinition]:
        out = []
        for group in getattr(self, event_type):
            if tool_name is None or group.matcher in ("", "*") or re.fullmatch(group.matcher, tool_name):
                out.extend(group.hooks)
        return out


# -- conversations ---------------------------------------------------------------------------


class StaticSecret(Lenient):
    """OpenHands' object form of a secret value."""

    kind: Literal["StaticSecret"] = "StaticSecret"
    value: str = Field(max_length=65536)


SecretValue = str | StaticSecret


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
    tags: dict[str, str] = Field(default_factory=dict, max_length=50)
    secrets: dict[str, SecretValue] = Field(default_factory=dict, max_length=200)
    repository: RepositorySpec | None = None
    """Cloned (shallow) into the working directory before the first step (SPEC 2.5)."""
    confirmation_policy: ConfirmationPolicy = Field(default_factory=NeverConfirm)
    hook_config: HookConfig | None = None


class UpdateSecrets(Lenient):
    """POST /api/conversations/{id}/secrets: add or replace."""

    secrets: dict[str, SecretValue] = Field(max_length=200)


class TokenUsage(BaseModel):
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    context_window: int = 0
    per_turn_token: int = 0
    response_id: str = ""


class Metrics(BaseModel):
    """Totals of a conversation's LLM use (OpenHands' MetricsSnapshot shape)."""

    model_name: str = "default"
    accumulated_cost: float = 0.0
    max_budget_per_task: float | None = None
    accumulated_token_usage: TokenUsage = Field(default_factory=TokenUsage)
    response_count: int = 0
    total_latency: float = 0.0


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
    webhook: WebhookStatus | None = Field(default=None, exclude=True)
    """Live lag of the webhook push, kept by agent_server.delivery; never saved."""


class ConversationInfo(BaseModel):
    """A conversation as the API returns it: the LLM key is never included."""

    id: UUID
    agent: dict[str, Any]
    workspace: Workspace
    execution_status: ExecutionStatus
    max_iterations: int
    stuck_detection: bool
    title: str | None
    tags: dict[str, str]
    metrics: Metrics
    secret_names: list[str]
    """Names of the conversation's own secrets; values are never returned."""
    repository: RepositorySpec | None = None
    repository_status: RepositoryStatus | None = None
    confirmation_policy: ConfirmationPolicy
    hook_config: HookConfig | None
    created_at: datetime
    updated_at: datetime
    webhook: WebhookStatus | None = None
    """The webhook push of this conversation (null when no webhook is configured)."""

    @classmethod
    def of(cls, record: StoredConversation) -> ConversationInfo:
        data = record.model_dump(exclude={"agent", "secrets"})
        return cls(agent=record.agent.redacted(), secret_names=sorted(record.secrets),
                   webhook=record.webhook, **data)


class ConversationPage(BaseModel):
    items: list[ConversationInfo]
    next_page_id: str | None = None


class ConversationSearch(Lenient):
    limit: int = Field(default=100, ge=1, le=100)
    page_id: UUID | None = None
    status: ExecutionStatus | None = None
    sort_order: Literal["CREATED_AT", "CREATED_AT_DESC", "UPDATED_AT", "UPDATED_AT_DESC"] = (
        "CREATED_AT_DESC"
    )


class ConversationIds(Lenient):
    ids: list[UUID] = Field(min_length=1, max_length=100)


class Success(BaseModel):
    success: bool = True


# -- events ----------------------------------------------------------------------------------


class EventSearch(Lenient):
    """Filters of GET .../events/search and .../events/count (SPEC 4.4, OpenHands names too)."""

    kind__eq: KindName | None = None
    kind: KindName | None = None
    source__eq: Literal["agent", "user", "environment", "hook"] | None = None
    source: Literal["agent", "user", "environment", "hook"] | None = None
    timestamp__gte: datetime | None = None
    timestamp__lt: datetime | None = None
    sort_order: Literal["TIMESTAMP", "TIMESTAMP_DESC"] = "TIMESTAMP"
    limit: int = Field(default=100, ge=1, le=1000)
    page_id: str | None = Field(default=None, pattern=rf"^{EVENT_ID_PATTERN}$")

    @field_validator("timestamp__gte", "timestamp__lt")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("timestamp needs a UTC offset, e.g. 2026-01-31T12:00:00+00:00")
        return value


class EventPage(BaseModel):
    items: list[dict[str, Any]]
    next_page_id: str | None = None


# -- settings --------------------------------------------------------------------------------


class SettingsAgent(Lenient):
    llm: LLMConfig | None = None
    tools: list[ToolSpec] = Field(default_factory=list, max_length=50)
    condenser: CondenserConfig = Field(default_factory=CondenserConfig)
    mcp_config: dict[str, Any] | None = None


class Settings(Lenient):
    """Stored defaults (PATCH /api/settings deep-merges into these)."""

    agent: SettingsAgent = Field(default_factory=SettingsAgent)
    git_user_name: str | None = Field(default=None, max_length=200)
    git_user_email: str | None = Field(default=None, max_length=200)
    secrets: dict[str, str] = Field(default_factory=dict, max_length=200)
    """Stored secrets; a conversation's own value wins on a name clash (SPEC 5 rule 4)."""


# -- workspace, repository, metadata ---------------------------------------------------------

TAG_KEY = re.compile(r"^[a-z0-9_-]{1,50}$")
BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]{1,255}(?<![./])$")
#: `user@host:path`, the scp-like form Git accepts for SSH.
SCP_URL = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:(?!//).+$")
RepositoryStatus = Literal["cloned", "failed"]


class RepositorySpec(Lenient):
    """`repository` at creation: what to clone into the working directory."""

    url: str = Field(min_length=1, max_length=2000)
    """https://, http://, ssh://, git://, file:// or user@host:path; never with a password in it."""
    branch: str | None = Field(default=None, max_length=255)
    credential_secret: str | None = Field(default=None, max_length=128)
    """Name of the conversation's secret holding an HTTPS token; sent through GIT_ASKPASS only."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        from urllib.parse import urlsplit

        value = value.strip()
        if value.startswith("-") or any(c.isspace() or ord(c) < 32 for c in value):
            raise ValueError("url must not start with '-' or hold spaces or control characters")
        parts = urlsplit(value)
        if parts.scheme in ("https", "http", "ssh", "git", "file"):
            if parts.password is not None:
                raise ValueError("url holds a password: put the credential in `secrets` and name "
                                 "it in `credential_secret`")
            if parts.scheme != "file" and not parts.hostname:
                raise ValueError("url has no host")
            return value
        if SCP_URL.match(value):
            return value
        raise ValueError("url must be https://, http://, ssh://, git:// or file:// "
                         "(or user@host:path)")

    @field_validator("branch")
    @classmethod
    def _branch(cls, value: str | None) -> str | None:
        if value is not None and (not BRANCH.match(value) or value.endswith(".lock")):
            raise ValueError("branch is not a valid Git branch name")
        return value

    @field_validator("credential_secret")
    @classmethod
    def _secret_name(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.match(value):
            raise ValueError("credential_secret is a secret name: letters, digits and _")
        return value


class FileQuery(Lenient):
    """?path= of GET and POST .../file: relative to the working directory, or absolute in it."""

    path: str = Field(min_length=1, max_length=4096)


class FileWritten(BaseModel):
    path: str
    """Relative to the working directory."""
    size: int


GitStatus = Literal["ADDED", "UPDATED", "DELETED", "MOVED"]


class GitChange(BaseModel):
    path: str
    """Relative to the working directory (repositories in subdirectories included)."""
    status: GitStatus
    old_path: str | None = None
    """Where a MOVED file was in HEAD."""


class DiffQuery(Lenient):
    path: str | None = Field(default=None, min_length=1, max_length=4096)
    """One file; without it the whole unified diff comes back as text/plain."""


class GitDiff(BaseModel):
    path: str
    original: str | None
    """The file in HEAD (null: not in HEAD)."""
    modified: str | None
    """The file in the working tree (null: deleted)."""


class RunCommand(Lenient):
    """POST .../commands: a shell command in the workspace, outside the agent's terminal."""

    command: str = Field(min_length=1, max_length=100_000)
    cwd: str | None = Field(default=None, min_length=1, max_length=4096)
    """Relative to the working directory (or absolute inside it)."""
    timeout: float = Field(default=60, gt=0, le=600)
    """Seconds; then the command's whole process group is killed."""
    env: dict[str, str] = Field(default_factory=dict, max_length=100)

    @field_validator("env")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, item in value.items():
            if not ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if len(item) > 65536 or "\x00" in item:
                raise ValueError(f"the value of {name} is over 65536 characters or holds NUL")
        return value


class CommandResult(BaseModel):
    exit_code: int
    """The command's status; -N when signal N ended it (a timeout sends SIGTERM, then SIGKILL)."""
    stdout: str
    stderr: str
    timed_out: bool


class UpdateConversation(Lenient):
    """PATCH /api/conversations/{id}: fields left out stay; tags given replace all tags."""

    title: str | None = Field(default=None, min_length=1, max_length=200)
    """null clears the title."""
    tags: dict[str, str] | None = None

    @field_validator("title")
    @classmethod
    def _title(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("title must not be blank")
        return value

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if len(value) > 50:
            raise ValueError("at most 50 tags")
        for key, item in value.items():
            if not TAG_KEY.match(key):
                raise ValueError(f"tag key {key!r}: 1 to 50 of a-z, 0-9, _ and -")
            if len(item) > 256:
                raise ValueError(f"tag {key!r}: values are at most 256 characters")
        return value
