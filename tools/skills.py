"""invoke_skill: read one of the workspace's skills on demand (SPEC 2.7 InvokeSkillAction).

The system prompt lists the skills by name and description; this tool returns a skill's
whole body. Which skills exist is the conversation's business (agent_server.agent.skills):
the tool is given their bodies by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events.tools.skills import InvokeSkillAction, InvokeSkillObservation
from tools.base import TextContent, Tool, ToolContext, ToolError


class InvokeSkillTool(Tool):
    name = "invoke_skill"
    description = (
        "Load a skill: instructions and knowledge for a kind of task, kept in the workspace. "
        "The system prompt lists the skills by name and description; call this with a name "
        "to read the skill in full before doing a task it covers."
    )
    action_type = InvokeSkillAction
    observation_type = InvokeSkillObservation
    acts = False
    read_only = True

    def __init__(
        self,
        ctx: ToolContext,
        params: Mapping[str, Any] | None = None,
        *,
        bodies: Mapping[str, str],
    ) -> None:
        super().__init__(ctx, params)
        self.bodies = bodies

    async def run(self, action: InvokeSkillAction) -> InvokeSkillObservation:
        body = self.bodies.get(action.name)
        if body is None:
            lowered = {k.lower(): k for k in self.bodies}
            found = lowered.get(action.name.strip().lower())
            if found is None:
                raise ToolError(
                    f"No skill named {action.name!r}. Skills: "
                    f"{', '.join(sorted(self.bodies)) or '(none)'}."
                )
            action_name, body = found, self.bodies[found]
        else:
            action_name = action.name
        return InvokeSkillObservation(skill_name=action_name, content=[TextContent(text=body)])


__all__ = ["InvokeSkillTool"]
