"""What an agent is told to be: its LLM, tools, condenser, policies, hooks and repository.

These are the parts of a creation request the agent itself reads (SPEC 2.6). Request models
tolerate unknown fields (clients of other servers send more); shapes follow the public
OpenHands agent server where the SPEC is silent.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    field_serializer,
    field_validator,
    model_validator,
)

from core.ids import ENV_NAME
from core.masking import MIN_LENGTH


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
            data["llm"]["api_key"] = "**********"
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
                server[field] = {k: v if _placeholder_only(v) else "**********"
                                 for k, v in values.items()}


def _placeholder_only(value: Any) -> bool:
    """`${NAME}` (a reference to a secret) is safe to show; a literal value may not be."""
    return isinstance(value, str) and re.fullmatch(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}", value) is not None


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


class HookDefinition(Lenient):
    type: Literal["command"] = "command"
    command: str = Field(min_length=1, max_length=10_000)
    timeout: float = Field(default=60, gt=0, le=3600)


class HookMatcher(Lenient):
    matcher: str = Field(default="*", max_length=1000, json_schema_extra={"anyOf": [{"enum": ["", "*"]}, {"format": "regex"}]})
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

    def add(self, usage: TokenUsage, cost: float, latency: float) -> None:
        """Count one response."""
        total = self.accumulated_token_usage
        self.model_name = usage.model or self.model_name
        self.accumulated_cost += cost
        self.response_count += 1
        self.total_latency += latency
        for name in ("prompt_tokens", "completion_tokens", "cache_read_tokens",
                     "cache_write_tokens", "reasoning_tokens"):
            setattr(total, name, getattr(total, name) + getattr(usage, name))
        total.per_turn_token = usage.per_turn_token
        total.response_id = usage.response_id
        total.model = usage.model


#: What a secret or an environment variable may be called, as a type: the document shows
#: the pattern (propertyNames) and the server checks the same one.
EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME.pattern)]
#: A secret's value: shorter ones would mask ordinary words all over the transcript.
SecretText = Annotated[str, StringConstraints(min_length=MIN_LENGTH, max_length=65536)]


BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]{1,255}(?<![./])(?<!\.lock)$")


#: The URLs a repository may be cloned from: a scheme Git speaks with a host (file:// without
#: one), an optional user but never a password; or scp-like user@host:path. Nothing starts
#: with "-" (an option to git) and nothing holds spaces or control characters.
REPOSITORY_URL = re.compile(
    r"^(?!-)(?:"
    r"(?:https?|ssh|git)://(?:[A-Za-z0-9._~%!$&'()*+,;=-]+@)?[A-Za-z0-9.-]+(?::[0-9]{1,5})?"
    r"(?:[/?#][^\x00-\x20\x7f]*)?"
    r"|file://[^\x00-\x20\x7f]*"
    r"|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:(?!//)[^\x00-\x20\x7f]+"
    r")$")


RepositoryStatus = Literal["cloned", "failed"]


class RepositorySpec(Lenient):
    """`repository` at creation: what to clone into the working directory."""

    url: str = Field(min_length=1, max_length=2000,
                     json_schema_extra={"pattern": REPOSITORY_URL.pattern})
    """https://, http://, ssh://, git://, file:// or user@host:path; never with a password in it."""
    branch: str | None = Field(default=None, max_length=255,
                               json_schema_extra={"pattern": BRANCH.pattern})
    credential_secret: str | None = Field(default=None, max_length=128,
                                          json_schema_extra={"pattern": ENV_NAME.pattern})
    """Name of the conversation's secret holding an HTTPS token; sent through GIT_ASKPASS only."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not REPOSITORY_URL.match(value):
            raise ValueError("url must be https://, http://, ssh://, git:// or file:// (or "
                             "user@host:path), without spaces, control characters or a password "
                             "(put the credential in `secrets` and name it in `credential_secret`)")
        return value

    @field_validator("branch")
    @classmethod
    def _branch(cls, value: str | None) -> str | None:
        if value is not None and not BRANCH.match(value):
            raise ValueError("branch is not a valid Git branch name")
        return value

    @field_validator("credential_secret")
    @classmethod
    def _secret_name(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.match(value):
            raise ValueError("credential_secret is a secret name: letters, digits and _")
        return value
