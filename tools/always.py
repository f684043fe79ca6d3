"""finish and think: the two tools every agent has (SPEC 2.6 rule 1).

Neither changes anything; the call, in the log, is the point. `finish` says the task is done
(or cannot be) and the loop ends the run after it; `think` gives the model a place to reason.
"""

from __future__ import annotations

from typing import Any, cast

from events.tools import AnyObservation
from events.tools.always import FinishAction, FinishObservation, ThinkAction, ThinkObservation
from tools.base import TextContent, Tool, ToolSet, single


class _Said(Tool):
    """A tool whose call only records what the model said; `answer` is what it reads back."""

    acts = False
    read_only = True

    def answer(self, action: Any) -> str:
        raise NotImplementedError

    async def run(self, action: Any) -> AnyObservation:
        content = [TextContent(text=self.answer(action))]
        return cast(AnyObservation, self.observation_type.model_validate({"content": content}))


class FinishTool(_Said):
    name = "finish"
    description = (
        "Signals that the task is complete (or cannot be completed). `message` tells the user "
        "what was done and anything they should know."
    )
    action_type = FinishAction
    observation_type = FinishObservation

    def answer(self, action: FinishAction) -> str:
        return action.message


class ThinkTool(_Said):
    name = "think"
    description = (
        "Use to think something through (plan, weigh options, digest a result) without acting. "
        "The thought is logged; nothing else happens."
    )
    action_type = ThinkAction
    observation_type = ThinkObservation

    def answer(self, action: ThinkAction) -> str:
        return "Your thought has been logged."


#: Added to every agent, whatever `agent.tools` names.
ALWAYS: tuple[ToolSet, ...] = (single(FinishTool), single(ThinkTool))

__all__ = ["ALWAYS", "FinishTool", "ThinkTool"]
