"""switch_llm: the agent moves its conversation to another saved LLM profile (OpenHands'
SwitchLLMTool). The call itself was made by the current model; the next request uses the
profile. The switch is recorded as an event by the conversation (tools.conversation.Models)."""

from __future__ import annotations

from events.tools.models import SwitchLLMAction, SwitchLLMObservation
from tools.base import TextContent, Tool
from tools.conversation import ProfileNotFound
from tools.models.common import models_of, profile_list


class SwitchLLMTool(Tool):
    name = "switch_llm"
    description = (
        "Switch this conversation to a saved LLM profile. Use it when another profile is "
        "better suited to the next step. This call is still executed by the current model; "
        "the switch takes effect on the next LLM call. Give profile_name exactly as listed "
        "(the list is also in the error when a name is unknown) and a concise reason."
    )
    action_type = SwitchLLMAction
    observation_type = SwitchLLMObservation

    async def run(self, action: SwitchLLMAction) -> SwitchLLMObservation:
        models = models_of(self.ctx)
        try:
            profile = await models.switch(action.profile_name, action.reason)
        except ProfileNotFound:
            return SwitchLLMObservation(
                profile_name=action.profile_name,
                reason=action.reason,
                is_error=True,
                content=[
                    TextContent(
                        text=f"LLM profile {action.profile_name!r} was not found. "
                        + profile_list(models.profiles())
                    )
                ],
            )
        return SwitchLLMObservation(
            profile_name=profile.name,
            reason=action.reason,
            active_model=profile.model,
            content=[
                TextContent(
                    text=(
                        f"Switched LLM profile to {profile.name!r} with active model "
                        f"{profile.model!r}. Reason: {action.reason} "
                        "Future agent steps will use this profile."
                    )
                )
            ],
        )
