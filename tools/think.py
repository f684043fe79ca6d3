"""think: a place for the model to reason; nothing happens but the log."""

from __future__ import annotations

from typing import Literal

from tools.base import Action, Observation, TextContent, Tool, single


class ThinkAction(Action):
    kind: Literal["ThinkAction"] = "ThinkAction"
    thought: str


class ThinkObservation(Observation):
    kind: Literal["ThinkObservation"] = "ThinkObservation"


class ThinkTool(Tool):
    name = "think"
    description = (
        "Use to think something through (plan, weigh options, digest a result) without acting. "
        "The thought is logged; nothing else happens."
    )
    action_type = ThinkAction
    observation_type = ThinkObservation
    acts = False
    read_only = True

    async def run(self, action: ThinkAction) -> ThinkObservation:
        return ThinkObservation(content=[TextContent(text="Your thought has been logged.")])


TOOL_SET = single(ThinkTool)
