"""What the tools that talk to other models share."""

from __future__ import annotations

from tools.base import ToolContext, ToolError
from tools.conversation import History, Models, ProfileInfo


def models_of(ctx: ToolContext) -> Models:
    if ctx.models is None:
        raise ToolError("LLM profiles are not available in this conversation.")
    return ctx.models


def history_of(ctx: ToolContext) -> History:
    if ctx.history is None:
        raise ToolError("The conversation's history is not available to this tool.")
    return ctx.history


def profile_list(profiles: list[ProfileInfo]) -> str:
    if not profiles:
        return "No LLM profiles are saved (PATCH /api/settings `llm_profiles`)."
    return "Saved profiles: " + ", ".join(f"{p.name} ({p.model})" for p in profiles) + "."
