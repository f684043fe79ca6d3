"""finish and think: the payloads of the two tools every agent has (SPEC 2.6 rule 1)."""

from __future__ import annotations

from typing import Literal

from events.tools.base import Action, Observation


class FinishAction(Action):
    kind: Literal["FinishAction"] = "FinishAction"
    message: str


class FinishObservation(Observation):
    kind: Literal["FinishObservation"] = "FinishObservation"


class ThinkAction(Action):
    kind: Literal["ThinkAction"] = "ThinkAction"
    thought: str


class ThinkObservation(Observation):
    kind: Literal["ThinkObservation"] = "ThinkObservation"


__all__ = [
    "FinishAction",
    "FinishObservation",
    "ThinkAction",
    "ThinkObservation",
]
