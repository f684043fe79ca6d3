"""invoke_skill: which skill the model reads, and the skill (SPEC 2.7 InvokeSkillAction)."""

from __future__ import annotations

from typing import Literal

from events.tools.base import Action, Observation


class InvokeSkillAction(Action):
    kind: Literal["InvokeSkillAction"] = "InvokeSkillAction"
    #: A skill name as the system prompt lists it.
    name: str


class InvokeSkillObservation(Observation):
    kind: Literal["InvokeSkillObservation"] = "InvokeSkillObservation"
    skill_name: str


__all__ = [
    "InvokeSkillAction",
    "InvokeSkillObservation",
]
