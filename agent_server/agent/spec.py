"""What an agent is told to be: its LLM, tools, MCP servers, condenser and critic, or the
external ACP agent it speaks for.

These are the parts of a creation request the agent itself reads (SPEC 2.6). Request models
tolerate unknown fields (clients of other servers send more); shapes follow the public
OpenHands agent server where the SPEC is silent. What the user sets around the agent's
actions (the confirmation policy, the hooks) is `policies`'s; the base of the request models
(`Lenient`) and the request's value types (names, arguments, secrets) are here, beneath both.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SecretStr,
    StringConstraints,
    Tag,
    field_serializer,
    model_validator,
)

from core.ids import ENV_NAME
from core.masking import (
    MIN_LENGTH,
    credentials,
    literal_values,
    mcp_literal_values,
    redact_literals,
    redact_llm,
    redact_mcp_config,
)

#: Text a process argument or environment value can hold (no NUL).
NO_NUL = r"^[^\x00]*$"
#: An environment variable's (or a secret's) name.
EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME.pattern)]
#: An argument of a program started for a conversation, and an environment value.
Argument = Annotated[str, Field(max_length=4096, pattern=NO_NUL)]
EnvValue = Annotated[str, Field(max_length=65536, pattern=NO_NUL)]


class Lenient(BaseModel):
    """Request models: unknown fields are ignored, not refused."""

    model_config = ConfigDict(extra="ignore")


class LLMConfig(Lenient):
    model: str = Field(min_length=1, max_length=200)
    api_key: SecretStr | None = None
    base_url: str | None = Field(default=None, max_length=2000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_output_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    api_mode: Literal["auto", "chat", "responses"] = "auto"  # as the SDK's: agent.responses
    reasoning_summary: Literal["auto", "concise", "detailed"] | None = None
    enable_encrypted_reasoning: bool = True
    timeout: float | None = Field(default=None, gt=0, le=3600)
    num_retries: int = Field(default=5, ge=0, le=20)
    stream: bool = False
    vision: bool | None = None
    """Whether the model reads images; unknown (None) asks litellm's model map."""
    usage_id: str = Field(default="default", max_length=100)
    log_completions: bool = False
    """Each call's request and response become an LLMCompletionLogEvent (masked, bounded);
    the OpenHands SDK's name (its `log_completions_folder` is not used: logs are events)."""
    return_token_ids: bool = False
    """Ask the server for the token ids of prompt and answer (vLLM's `return_token_ids`); each
    answer that carries both becomes a TokenEvent. Needs `stream` off: litellm drops the ids
    from streamed chunks."""
    litellm_extra_body: dict[str, Any] = Field(default_factory=dict, max_length=50)
    """More fields for the request body, for servers that take them (the OpenHands SDK's
    name); `{"return_token_ids": true}` here works as `return_token_ids` does."""

    @property
    def wants_token_ids(self) -> bool:
        return self.return_token_ids or self.litellm_extra_body.get("return_token_ids") is True

    @model_validator(mode="after")
    def _token_ids_unstreamed(self) -> LLMConfig:
        if self.stream and self.wants_token_ids:
            raise ValueError(
                "return_token_ids needs stream false: litellm drops token ids from streamed chunks"
            )
        return self

    @field_serializer("api_key", when_used="json")
    def _dump_key(self, key: SecretStr | None) -> str | None:
        # Stored metadata keeps the key (mode 0600); responses go through `redacted()`.
        return None if key is None else key.get_secret_value()


def _kind_required(schema: dict[str, Any]) -> None:
    """In the document, a variant chosen by its `kind` must name it (the server picks it by
    that field), so exactly one variant of the union matches any value (`oneOf`)."""
    required = schema.setdefault("required", [])
    if "kind" not in required:
        required.append("kind")


def _no_kind(schema: dict[str, Any]) -> None:
    """Our own condenser form is the one without a `kind`."""
    schema["not"] = {"required": ["kind"]}


class CondenserConfig(Lenient):
    """Our own form (no `kind`): when the history is condensed (summarized) to stay inside the
    model's context window, by the agent's own LLM."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=_no_kind)

    enabled: bool = True
    max_share: float = Field(default=0.75, gt=0, le=1)
    """Condense when a request's prompt would pass this share of the model's context window."""
    max_tokens: int | None = Field(default=None, ge=500, le=10_000_000)
    """Condense when a request's prompt would pass this many tokens (estimated)."""
    max_events: int | None = Field(default=None, ge=6, le=100_000)
    """Condense when the model's view holds more messages than this."""


class NoOpCondenser(Lenient):
    """The OpenHands SDK's no-op condenser: nothing is condensed on its own."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=_kind_required)

    kind: Literal["NoOpCondenser"] = "NoOpCondenser"


class LLMSummarizingCondenser(Lenient):
    """The OpenHands SDK's summarizing condenser: past `max_size` messages (or `max_tokens`),
    the middle of the history after the first `keep_first` is summarized by `llm`."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=_kind_required)

    kind: Literal["LLMSummarizingCondenser"] = "LLMSummarizingCondenser"
    llm: LLMConfig
    max_size: int = Field(default=240, gt=0, le=100_000)
    max_tokens: int | None = Field(default=None, gt=0, le=10_000_000)
    keep_first: int = Field(default=2, ge=0)
    minimum_progress: float = Field(default=0.1, gt=0, lt=1)
    hard_context_reset_max_retries: int = Field(default=5, gt=0)
    hard_context_reset_context_scaling: float = Field(default=0.8, gt=0, lt=1)

    @model_validator(mode="after")
    def _room(self) -> LLMSummarizingCondenser:
        if self.keep_first >= self.max_size // 2:
            raise ValueError(
                "keep_first must be less than max_size // 2 to leave room for condensation"
            )
        return self


class PipelineCondenser(Lenient):
    """The OpenHands SDK's pipeline: each condenser in turn."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=_kind_required)

    kind: Literal["PipelineCondenser"] = "PipelineCondenser"
    condensers: list[CondenserSpec] = Field(default_factory=list, max_length=10)


def condenser_tag(value: Any) -> str:
    """Our own form has no `kind`; the SDK's kinds name themselves. A `kind` given as anything
    but one of their names (null among them) names no form: refused, as the document's `oneOf`
    says, not read as ours with the rest ignored."""
    if isinstance(value, dict):
        if "kind" not in value:
            return "ours"
        kind = value["kind"]
        return kind if isinstance(kind, str) and kind != "ours" else "unnamed"
    kind = getattr(value, "kind", None)
    return "ours" if kind is None else str(kind)


CondenserSpec = Annotated[
    Annotated[CondenserConfig, Tag("ours")]
    | Annotated[NoOpCondenser, Tag("NoOpCondenser")]
    | Annotated[LLMSummarizingCondenser, Tag("LLMSummarizingCondenser")]
    | Annotated[PipelineCondenser, Tag("PipelineCondenser")],
    Discriminator(
        condenser_tag,
        custom_error_type="condenser_kind",
        custom_error_message="kind must be NoOpCondenser, LLMSummarizingCondenser or "
        "PipelineCondenser (or no kind: our own form)",
    ),
]
"""`agent.condenser`: our own form, or one of the OpenHands SDK's kinds; null: none."""
PipelineCondenser.model_rebuild()


def sdk_condenser(spec: CondenserSpec | None, llm: dict[str, Any]) -> dict[str, Any] | None:
    """A condenser as the OpenHands SDK reads it (`llm`: the agent's, already masked).

    Our own form is shown as the nearest SDK kind, its own fields kept beside."""
    if spec is None:
        return None
    if isinstance(spec, CondenserConfig):
        ours = spec.model_dump(mode="json")
        if not spec.enabled:
            return {"kind": "NoOpCondenser", **ours}
        return {
            "kind": "LLMSummarizingCondenser",
            "llm": llm,
            "max_size": spec.max_events or 240,
            "keep_first": 2,
            **ours,
        }
    if isinstance(spec, PipelineCondenser):
        return {"kind": spec.kind, "condensers": [sdk_condenser(c, llm) for c in spec.condensers]}
    data = spec.model_dump(mode="json")
    if isinstance(spec, LLMSummarizingCondenser):
        data["llm"] = redact_llm(data["llm"])
    return data


CriticMode = Literal["finish_and_message", "all_actions"]


class ModelCritic(Lenient):
    """A language model asked, with a fixed prompt, how likely the agent's work is to be
    what the user wanted: a score from 0 to 1 and a sentence why."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=_kind_required)

    kind: Literal["ModelCritic"] = "ModelCritic"
    llm: LLMConfig
    mode: CriticMode = "finish_and_message"
    """What is judged: each `finish` and each agent message, or every action too (the
    OpenHands SDK's modes; every action costs a critic call per step)."""
    timeout: float = Field(default=120.0, gt=0, le=600)
    """Seconds a judgement may take; past it the event goes out without a critic_result."""


class CommandCritic(Lenient):
    """A command run in the workspace with the judged content as JSON on stdin; it prints
    `{"score": 0..1, "message": "...", "metadata": {...}}` (metadata optional)."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=_kind_required)

    kind: Literal["CommandCritic"] = "CommandCritic"
    command: str = Field(min_length=1, max_length=10_000, pattern=NO_NUL)
    mode: CriticMode = "finish_and_message"
    timeout: float = Field(default=60.0, gt=0, le=600)


class _LocalCritic(Lenient):
    """The OpenHands SDK's critics that need neither a model nor a command (agent.critic):
    PassCritic always 1; EmptyPatchCritic 1 when the workspace's repositories have changes
    against HEAD (a non-empty patch), else 0 (the SDK passes it no patch, so there it always
    scores 0); AgentFinishedCritic 1 when they do and the last action is `finish`, else 0.
    Their `iterative_refinement` is ignored: this server does not retry on a low score."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=_kind_required)
    mode: CriticMode = "finish_and_message"


class PassCritic(_LocalCritic):
    kind: Literal["PassCritic"] = "PassCritic"


class EmptyPatchCritic(_LocalCritic):
    kind: Literal["EmptyPatchCritic"] = "EmptyPatchCritic"


class AgentFinishedCritic(_LocalCritic):
    kind: Literal["AgentFinishedCritic"] = "AgentFinishedCritic"


CRITIC_KINDS = (
    "ModelCritic",
    "CommandCritic",
    "PassCritic",
    "EmptyPatchCritic",
    "AgentFinishedCritic",
)


def _critic_tag(value: Any) -> str | None:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind in CRITIC_KINDS else None


CriticSpec = Annotated[
    Annotated[ModelCritic, Tag("ModelCritic")]
    | Annotated[CommandCritic, Tag("CommandCritic")]
    | Annotated[PassCritic, Tag("PassCritic")]
    | Annotated[EmptyPatchCritic, Tag("EmptyPatchCritic")]
    | Annotated[AgentFinishedCritic, Tag("AgentFinishedCritic")],
    Discriminator(
        _critic_tag,
        custom_error_type="critic_kind",
        custom_error_message="kind must be one of " + ", ".join(CRITIC_KINDS),
    ),
]
"""`agent.critic`: what scores the agent's finishes and messages (CriticResult); null: none."""


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
    condenser: CondenserSpec | None = Field(default_factory=CondenserConfig)
    """Left out: our own form's defaults; null: no condenser (as the OpenHands SDK means it)."""
    critic: CriticSpec | None = None
    """Scores each `finish` and agent message (their `critic_result`); off when left out."""

    def redacted(self) -> dict[str, Any]:
        """For responses, in the shape the OpenHands SDK validates (`AgentBase`): the LLM key
        and literal MCP env and header values masked, the condenser with its `kind`."""
        data = self.model_dump(mode="json")
        data["llm"] = redact_llm(data["llm"])
        if isinstance(data.get("critic"), dict) and isinstance(data["critic"].get("llm"), dict):
            data["critic"]["llm"] = redact_llm(data["critic"]["llm"])
        data["mcp_config"] = data.get("mcp_config") or {}
        redact_mcp_config(data["mcp_config"])
        data["condenser"] = sdk_condenser(self.condenser, data["llm"])
        return data

    def literal_values(self) -> list[str]:
        """What `redacted` hides (the LLM keys, literal MCP env and header values): masked in
        events as well, since a tool server may print its own environment and an agent may
        read its own key where the server keeps it."""
        return [*credentials(self), *mcp_literal_values(self.mcp_config)]


#: The LLM an ACP agent's record carries: never called (the external agent picks its model);
#: it keeps what reads `agent.llm` (stats, switches) working, as the OpenHands SDK's does.
ACP_LLM_MODEL = "acp-managed"


class ACPAgentSpec(Lenient):
    """An external agent spoken to over the Agent Client Protocol (the OpenHands SDK's
    `ACPAgent` shape): the server starts `acp_command` + `acp_args` in the working directory
    and relays its messages and tool calls as events."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=_kind_required)

    kind: Literal["ACPAgent"] = "ACPAgent"
    acp_command: list[Annotated[Argument, Field(min_length=1)]] = Field(
        default_factory=list, min_length=1, max_length=100
    )
    """The program and its first arguments, e.g. ["npx", "-y", "@zed-industries/claude-code-acp"].
    Left out: the ACP agent saved in the settings under `acp_server` (its command, args, env)."""
    acp_server: str | None = Field(default=None, min_length=1, max_length=100)
    """The name of an ACP agent saved in the settings (`acp_agents`) when `acp_command` is left
    out; beside an `acp_command`, a label only (the SDK's provider key)."""
    acp_args: list[Argument] = Field(default_factory=list, max_length=100)
    acp_env: dict[EnvName, EnvValue] = Field(default_factory=dict, max_length=100)
    """Extra environment of the agent process; `${NAME}` in a value is filled from the
    conversation's secrets (which reach the agent as variables of their own names too)."""
    acp_prompt_timeout: float = Field(default=1800.0, gt=0, le=86_400)
    """Seconds a turn may go without any update from the agent before it is ended (ERROR)."""
    acp_startup_timeout: float = Field(default=90.0, gt=0, le=3600)
    """Seconds for the process to start and answer initialize and session/new (or /load)."""
    llm: LLMConfig = Field(
        default_factory=lambda: LLMConfig(model=ACP_LLM_MODEL, usage_id=ACP_LLM_MODEL)
    )
    tools: list[ToolSpec] = Field(default_factory=list, max_length=0)
    """Always empty: an ACP agent brings its own tools."""
    mcp_config: dict[str, Any] | None = None
    condenser: CondenserSpec | None = None

    def redacted(self) -> dict[str, Any]:
        """For responses: literal environment values masked (`${NAME}` references shown)."""
        data = self.model_dump(mode="json")
        data["llm"] = redact_llm(data["llm"])
        data["acp_env"] = redact_literals(data["acp_env"])
        return data

    def literal_values(self) -> list[str]:
        """What `redacted` hides (literal acp_env values, a key): masked in events as well,
        since the agent may print its own environment (on stderr, in a crash report)."""
        return [*credentials(self), *literal_values(self.acp_env)]


def _agent_tag(value: Any) -> str:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return "ACPAgent" if kind == "ACPAgent" else "Agent"


AnyAgentSpec = Annotated[
    Annotated[AgentSpec, Tag("Agent")] | Annotated[ACPAgentSpec, Tag("ACPAgent")],
    Discriminator(_agent_tag),
]
"""`agent` of a creation request: our own agent (no `kind`, or "Agent") or an ACP agent."""


#: A secret's value: shorter ones would mask ordinary words all over the transcript.
SecretText = Annotated[str, StringConstraints(min_length=MIN_LENGTH, max_length=65536)]
