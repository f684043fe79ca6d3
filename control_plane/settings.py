"""Per-user settings (GET/PATCH /api/v1/settings): grouping strategy, LLM, default tools, git
author, stored secrets. The LLM key and the secrets are encrypted at rest and never returned."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, StringConstraints, field_validator

from control_plane.crypto import Cipher
from control_plane.models import GroupingStrategy
from control_plane.network.policy import OPEN, NetworkPolicy
from control_plane.store import Database, accounts
from control_plane.store.accounts import StoredSettings
from core.ids import ENV_NAME
from core.masking import MIN_LENGTH, REDACTED, check_secrets

MASK = REDACTED
DEFAULT_TOOLS = ("terminal", "file_editor", "task_tracker")
TOOL_NAMES = ("terminal", "file_editor", "task_tracker", "browser_tool_set")
ToolName = Literal["terminal", "file_editor", "task_tracker", "browser_tool_set"]
SECRET_NAME = ENV_NAME


#: The longest secret value a sandbox's agent server takes.
MAX_SECRET = 65536
#: A secret as the document declares it (names and values are also checked below, in words).
SecretName = Annotated[str, StringConstraints(pattern=SECRET_NAME.pattern)]
SecretText = Annotated[str, StringConstraints(min_length=MIN_LENGTH, max_length=MAX_SECRET)]
#: At most 200 secrets, each name matching (pydantic says only `patternProperties`, which would
#: let any other name through the document).
NAMED = Field(max_length=200, json_schema_extra={"additionalProperties": False})


def check_secret_names(value: dict[str, Any]) -> None:
    """Names, and values by the agent server's own rules (`core.masking.check_secrets`, at
    most MAX_SECRET characters): a value it would refuse is refused where it enters, before
    it is stored and makes every later start of this user fail."""
    for name in value:
        if not SECRET_NAME.match(name):
            raise ValueError(f"{name!r} is not a secret name (letters, digits and _)")
    texts = {name: v for name, v in value.items() if isinstance(v, str)}
    for name, problem in check_secrets(texts):
        raise ValueError(f"secret {name!r}: {problem}")
    if any(len(v) > MAX_SECRET for v in texts.values()):
        raise ValueError(f"a secret value is over {MAX_SECRET} characters")


class SettingsView(BaseModel):
    """What GET returns: the key masked, secrets by name only."""

    grouping_strategy: GroupingStrategy
    llm_model: str | None
    llm_base_url: str | None
    llm_api_key: str | None
    """`**********` when set, else null (write-only)."""
    llm_stream: bool
    """Whether new conversations stream the model's text (`agent.llm.stream`): the console shows
    it as it is written."""
    default_tools: list[str]
    git_user_name: str | None
    git_user_email: str | None
    secret_names: list[str]
    network_policy: NetworkPolicy
    """The egress policy new sandboxes start with (each sandbox's own may be changed later)."""
    llm_daily_budget_usd: float | None
    """What this user's sandboxes may spend on the LLM through the gateway per UTC day; null:
    the deployment's cap alone (if any)."""
    llm_requests_per_minute: int | None
    """LLM requests per minute through the gateway; null: the deployment's cap alone."""


class SettingsPatch(BaseModel):
    """PATCH body: fields left out stay; null clears; `secrets` merge by name (null removes one)."""

    model_config = ConfigDict(extra="forbid")

    grouping_strategy: GroupingStrategy | None = None
    llm_model: str | None = Field(default=None, min_length=1, max_length=200)
    llm_base_url: str | None = Field(default=None, max_length=2000, pattern=r"^https?://")
    llm_api_key: SecretStr | None = Field(default=None, max_length=10_000)
    llm_stream: bool | None = None
    """null: back to the default (false)."""
    default_tools: list[ToolName] | None = Field(default=None, max_length=10)
    git_user_name: str | None = Field(default=None, max_length=200)
    git_user_email: str | None = Field(default=None, max_length=200)
    secrets: Annotated[dict[SecretName, SecretText | None], NAMED] | None = None
    network_policy: NetworkPolicy | None = None
    """null: back to the default (`open`)."""
    llm_daily_budget_usd: float | None = Field(default=None, gt=0, le=1_000_000)
    llm_requests_per_minute: int | None = Field(default=None, ge=1, le=100_000)

    @field_validator("default_tools")
    @classmethod
    def _tools(cls, value: list[str] | None) -> list[str] | None:
        for name in value or ():
            if name not in TOOL_NAMES:
                raise ValueError(f"unknown tool {name!r}; known: {', '.join(TOOL_NAMES)}")
        return value

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, value: dict[str, str | None] | None) -> dict[str, str | None] | None:
        if value:
            check_secret_names(value)
        return value


@dataclass(frozen=True)
class UserSettings:
    """Settings as a start task uses them (decrypted)."""

    grouping_strategy: GroupingStrategy = GroupingStrategy.NO_GROUPING
    llm_model: str | None = None
    llm_base_url: str | None = None
    llm_api_key: str | None = None
    llm_stream: bool = False
    default_tools: tuple[str, ...] = DEFAULT_TOOLS
    git_user_name: str | None = None
    git_user_email: str | None = None
    secrets: dict[str, str] = field(default_factory=dict)
    network_policy: NetworkPolicy = OPEN
    llm_daily_budget_usd: float | None = None
    llm_requests_per_minute: int | None = None

    def view(self) -> SettingsView:
        return SettingsView(
            grouping_strategy=self.grouping_strategy,
            llm_model=self.llm_model,
            llm_base_url=self.llm_base_url,
            llm_api_key=MASK if self.llm_api_key else None,
            llm_stream=self.llm_stream,
            default_tools=list(self.default_tools),
            git_user_name=self.git_user_name,
            git_user_email=self.git_user_email,
            secret_names=sorted(self.secrets),
            network_policy=self.network_policy,
            llm_daily_budget_usd=self.llm_daily_budget_usd,
            llm_requests_per_minute=self.llm_requests_per_minute,
        )


PLAIN = (
    "grouping_strategy",
    "llm_model",
    "llm_base_url",
    "llm_stream",
    "default_tools",
    "git_user_name",
    "git_user_email",
    "llm_daily_budget_usd",
    "llm_requests_per_minute",
)


class SettingsService:
    def __init__(self, db: Database, cipher: Cipher) -> None:
        self.db = db
        self.cipher = cipher

    async def get(self, user_id: str) -> UserSettings:
        stored = await accounts.get_settings(self.db, user_id)
        data = dict(stored.data)
        return UserSettings(
            grouping_strategy=GroupingStrategy(data.get("grouping_strategy") or "NO_GROUPING"),
            llm_model=data.get("llm_model"),
            llm_base_url=data.get("llm_base_url"),
            llm_api_key=self.cipher.decrypt(stored.llm_api_key_enc)
            if stored.llm_api_key_enc
            else None,
            llm_stream=bool(data.get("llm_stream")),
            default_tools=tuple(data.get("default_tools") or DEFAULT_TOOLS),
            git_user_name=data.get("git_user_name"),
            git_user_email=data.get("git_user_email"),
            secrets=self.cipher.decrypt_json(stored.secrets_enc) if stored.secrets_enc else {},
            network_policy=NetworkPolicy.model_validate(data.get("network_policy") or {}),
            llm_daily_budget_usd=data.get("llm_daily_budget_usd"),
            llm_requests_per_minute=data.get("llm_requests_per_minute"),
        )

    async def patch(self, user_id: str, patch: SettingsPatch) -> UserSettings:
        stored = await accounts.get_settings(self.db, user_id)
        given = patch.model_fields_set
        data = dict(stored.data)
        for name in PLAIN:
            if name in given:
                value = getattr(patch, name)
                data[name] = value.value if isinstance(value, GroupingStrategy) else value
        if "network_policy" in given:
            data["network_policy"] = (
                patch.network_policy.model_dump(mode="json") if patch.network_policy else None
            )
        key_enc = stored.llm_api_key_enc
        if "llm_api_key" in given:
            key = patch.llm_api_key.get_secret_value() if patch.llm_api_key else None
            key_enc = self.cipher.encrypt(key) if key else None
        secrets_enc = stored.secrets_enc
        if "secrets" in given:
            current = self.cipher.decrypt_json(secrets_enc) if secrets_enc else {}
            for name, value in (patch.secrets or {}).items():
                if value is None:
                    current.pop(name, None)
                else:
                    current[name] = value
            secrets_enc = self.cipher.encrypt_json(current) if current else None
        await accounts.put_settings(
            self.db, user_id, StoredSettings(data, key_enc, secrets_enc, None)
        )
        return await self.get(user_id)
