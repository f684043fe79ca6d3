"""finish: the agent says it is done; the loop ends the run after this call."""

from __future__ import annotations

from typing import Literal

from tools.base import Action, Observation, TextContent, Tool, single


class FinishAction(Action):
    kind: Literal["FinishAction"] = "FinishAction"
    message: str


class FinishObservation(Observation):
    kind: Literal["FinishObservation"] = "FinishObservation"


class FinishTool(Tool):
    name = "finish"
    description = (
        "Signals that the task is complete (or cannot be completed). `message` tells the user "
        "what was done and anything they should know."
    )
    action_type = FinishAction
    observation_type = FinishObservation
    acts = False
    read_only = True

    async def run(self, action: FinishAction) -> FinishObservation:
        return FinishObservation(content=[TextContent(text=action.message)])


TOOL_SET = single(FinishTool)
