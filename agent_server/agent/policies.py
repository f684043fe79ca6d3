"""What the user sets around an agent's actions: when one waits for a yes, and which
commands run beside it.

A creation request carries these beside `agent`, in the public OpenHands agent server's
shapes (SPEC 2.6 is silent on them): `confirmation_policy`, whether an action waits for the
user's confirmation before it runs (`confirmation`), and `hook_config`, the commands run at
the agent's moments (around a tool call, at a prompt, at a session's start and end, at a
stop), any of which may block what it is told of (`hooks`). Neither is part of the agent
(`spec`): the agent's spec says what it thinks and acts with; these say how far it is trusted
to act alone and who looks on. The policy is also set on its own while a conversation runs
(`POST .../confirmation_policy`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from agent_server.agent.spec import Lenient

# -- confirmation (SPEC 3.2) -------------------------------------------------------------------
# Which actions wait for the user's accept (`confirmation.needs_confirmation`): none, every
# one, or those of a security risk at `threshold` or above (and, unless `confirm_unknown` is
# off, those of an unknown risk). The OpenHands SDK's policy kinds, by their `kind`.


class NeverConfirm(Lenient):
    kind: Literal["NeverConfirm"] = "NeverConfirm"


class AlwaysConfirm(Lenient):
    kind: Literal["AlwaysConfirm"] = "AlwaysConfirm"


class ConfirmRisky(Lenient):
    kind: Literal["ConfirmRisky"] = "ConfirmRisky"
    threshold: Literal["LOW", "MEDIUM", "HIGH"] = "HIGH"
    confirm_unknown: bool = True


ConfirmationPolicy = Annotated[
    NeverConfirm | AlwaysConfirm | ConfirmRisky, Field(discriminator="kind")
]


# -- hooks -----------------------------------------------------------------------------------
# One command per definition, in groups whose `matcher` picks the tools they are run for; the
# groups are listed by event type (`HookConfig`). What a hook is told and how it answers is
# `hooks`'s.


class HookDefinition(Lenient):
    type: Literal["command"] = "command"
    command: str = Field(min_length=1, max_length=10_000)
    timeout: float = Field(default=60, gt=0, le=3600)


class HookMatcher(Lenient):
    matcher: str = Field(
        default="*",
        max_length=1000,
        json_schema_extra={"anyOf": [{"enum": ["", "*"]}, {"format": "regex"}]},
    )
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


HOOK_EVENT_TYPES = (
    "PreToolUse",
    "PostToolUse",
    "UserPromptSubmit",
    "SessionStart",
    "SessionEnd",
    "Stop",
)


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
            if (
                tool_name is None
                or group.matcher in ("", "*")
                or re.fullmatch(group.matcher, tool_name)
            ):
                out.extend(group.hooks)
        return out
