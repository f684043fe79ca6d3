"""SettingsStore: the stored default agent, LLM profiles and ACP agents (PATCH /api/settings),
deep-merged and validated."""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StringConstraints, ValidationError, field_validator

from agent_server.agent.spec import (
    ACPAgentSpec,
    Argument,
    CondenserConfig,
    CondenserSpec,
    EnvName,
    EnvValue,
    Lenient,
    LLMConfig,
    SecretText,
    ToolSpec,
    condenser_tag,
)
from agent_server.errors import untagged
from core.files import read_json, write_json
from core.masking import REDACTED, check_secrets, redact, redact_literals, redact_mcp_config
from web.errors import from_pydantic, invalid

PROFILE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
ProfileName = Annotated[str, StringConstraints(pattern=PROFILE_NAME.pattern)]


class SettingsAgent(Lenient):
    llm: LLMConfig | None = None
    tools: list[ToolSpec] = Field(default_factory=list, max_length=50)
    condenser: CondenserSpec = Field(default_factory=CondenserConfig)
    mcp_config: dict[str, Any] | None = None


class SavedACPAgent(Lenient):
    """An ACP agent saved by name (settings `acp_agents`): a conversation's agent
    `{"kind": "ACPAgent", "acp_server": NAME}` without `acp_command` starts this one. Literal
    `acp_env` values are secrets: shown masked, masked in the conversation's events."""

    acp_command: list[Annotated[Argument, Field(min_length=1)]] = Field(
        min_length=1, max_length=100
    )
    acp_args: list[Argument] = Field(default_factory=list, max_length=100)
    acp_env: dict[EnvName, EnvValue] = Field(default_factory=dict, max_length=100)
    acp_prompt_timeout: float | None = Field(default=None, gt=0, le=86_400)
    acp_startup_timeout: float | None = Field(default=None, gt=0, le=3600)

    def applied_to(self, agent: ACPAgentSpec) -> ACPAgentSpec:
        """The conversation's agent with this command: the request's own args follow these,
        its env wins on a name clash, its timeouts win when it gives them."""
        given = agent.model_fields_set
        update: dict[str, Any] = {
            "acp_command": self.acp_command,
            "acp_args": [*self.acp_args, *agent.acp_args],
            "acp_env": {**self.acp_env, **agent.acp_env},
        }
        for name in ("acp_prompt_timeout", "acp_startup_timeout"):
            if name not in given and getattr(self, name) is not None:
                update[name] = getattr(self, name)
        # Validated again: the merged args and env keep the request's own bounds.
        return ACPAgentSpec.model_validate({**agent.model_dump(exclude_unset=True), **update})


class Settings(Lenient):
    """Stored defaults (PATCH /api/settings deep-merges into these)."""

    agent: SettingsAgent = Field(default_factory=SettingsAgent)
    git_user_name: str | None = Field(default=None, max_length=200)
    git_user_email: str | None = Field(default=None, max_length=200)
    secrets: dict[EnvName, SecretText] = Field(default_factory=dict, max_length=200)
    """Stored secrets; a conversation's own value wins on a name clash (SPEC 5 rule 4)."""
    llm_profiles: dict[ProfileName, LLMConfig] = Field(default_factory=dict, max_length=50)
    """Saved LLMs by name (keys shown masked): what switch_llm, vision_inspect,
    consult_advisor and the switch_profile route may use."""
    acp_agents: dict[ProfileName, SavedACPAgent] = Field(default_factory=dict, max_length=50)
    """Saved ACP agents by name (literal env values shown masked): what a conversation's
    ACPAgent names in `acp_server` instead of giving its `acp_command`."""

    def git_author(self) -> dict[str, str]:
        """GIT_AUTHOR_* and GIT_COMMITTER_* of the processes started for a conversation: commit
        authorship comes from these settings, never from a push credential (SPEC 5 rule 5)."""
        name = self.git_user_name or "agent-server"
        email = self.git_user_email or "agent-server@localhost"
        return {
            "GIT_AUTHOR_NAME": name,
            "GIT_COMMITTER_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_EMAIL": email,
        }

    @field_validator("llm_profiles", "acp_agents")
    @classmethod
    def _profile_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if not PROFILE_NAME.match(name):
                raise ValueError(
                    f"profile name {name!r}: 1 to 100 letters, digits, '.', '_' or '-'"
                )
        return value


#: Fields holding one form of a union, by the function that names the form: a value of
#: another form replaces the stored one whole (two forms' fields never merge into one object).
FORMS = {"condenser": condenser_tag}


def deep_merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """Objects merge key by key; null removes a key; anything else (lists too) replaces, and
    so does an object of another form than the stored one (FORMS)."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        form = FORMS.get(key)
        if value is None:  # null removes: a setting back to its default, a secret gone
            out.pop(key, None)
        elif (
            isinstance(value, dict)
            and isinstance(out.get(key), dict)
            and (form is None or form(value) == form(out[key]))
        ):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _keep_redacted(changes: Any, current: Any) -> Any:
    """A client that sends back the mask it was shown keeps the stored secret."""
    if isinstance(changes, dict):
        cur = current if isinstance(current, dict) else {}
        return {
            k: (cur.get(k) if v == REDACTED else _keep_redacted(v, cur.get(k)))
            for k, v in changes.items()
        }
    return changes


class SettingsStore:
    def __init__(self, path: Path, check: Callable[[Settings], None] | None = None) -> None:
        """`check` refuses settings that validate but cannot be used (unknown tool names)."""
        self.path = path
        self.check = check
        self._raw: dict[str, Any] = {}
        self._settings = Settings()
        self._lock = asyncio.Lock()

    def load(self) -> None:
        if self.path.is_file():
            raw = read_json(self.path)
            self._settings = Settings.model_validate(raw)
            self._raw = self._settings.model_dump(mode="json", exclude_none=True)

    def get(self) -> Settings:
        return self._settings

    def public(self) -> dict[str, Any]:
        data: dict[str, Any] = redact(self._settings.model_dump(mode="json"))
        redact_mcp_config(data["agent"].get("mcp_config"))
        for agent in data["acp_agents"].values():
            agent["acp_env"] = redact_literals(agent["acp_env"])
        return data

    async def patch(self, changes: dict[str, Any]) -> Settings:
        """Merge, validate the result whole, then write it; a bad patch changes nothing."""
        async with self._lock:
            merged = deep_merge(self._raw, _keep_redacted(changes, self._raw))
            try:
                # Strictly, as a request body is read (api.io.validate_json): 0 is no boolean.
                settings = Settings.model_validate_json(json.dumps(merged), strict=True)
            except ValidationError as exc:
                raise from_pydantic(exc, untag=untagged) from None
            for name, problem in check_secrets(settings.secrets):
                raise invalid(["secrets", name], problem)
            if self.check is not None:
                self.check(settings)
            raw = settings.model_dump(mode="json", exclude_none=True)
            await asyncio.to_thread(write_json, self.path, raw)
            self._settings, self._raw = settings, raw
            return settings
