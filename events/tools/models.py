"""The payloads of the tools that work through other models: switch_llm, vision_inspect,
consult_advisor and sleeptime_compute (the last two are ours; docs/agent-server.md documents
them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from events.tools.base import Action, Observation


class SwitchLLMAction(Action):
    kind: Literal["SwitchLLMAction"] = "SwitchLLMAction"
    profile_name: str = Field(
        min_length=1,
        max_length=100,
        description="Name of the saved LLM profile to use for future agent steps.",
    )
    reason: str = Field(
        max_length=2000,
        description="Brief reason why this profile is a better fit for the next step.",
    )


class SwitchLLMObservation(Observation):
    kind: Literal["SwitchLLMObservation"] = "SwitchLLMObservation"
    profile_name: str = Field(
        description="Name of the profile that the tool attempted to activate."
    )
    reason: str | None = Field(
        default=None, description="Reason the agent gave for attempting this LLM profile switch."
    )
    active_model: str | None = Field(
        default=None, description="Model configured by the activated profile, when available."
    )


class VisionInspectAction(Action):
    kind: Literal["VisionInspectAction"] = "VisionInspectAction"
    image_index: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Zero-based index of the image to inspect from the latest user message.",
    )
    question: str = Field(
        min_length=1,
        max_length=10_000,
        description="Question to ask the vision model about the image.",
    )
    profile_name: str | None = Field(
        default=None,
        max_length=100,
        description="Optional saved vision-capable LLM profile name; if omitted, the "
        "configured or first vision profile is used.",
    )
    path: str | None = Field(
        default=None,
        max_length=4096,
        exclude_if=lambda v: v is None,
        description="Inspect this image file of the workspace (PNG, JPEG, GIF or WebP) instead "
        "of a user message's image.",
    )
    screenshot: bool = Field(
        default=False,
        exclude_if=lambda v: v is False,
        description="Inspect the last screenshot the browser tools took instead.",
    )


class VisionInspectObservation(Observation):
    kind: Literal["VisionInspectObservation"] = "VisionInspectObservation"
    image_index: int = Field(description="Image index that was inspected.")
    question: str = Field(description="Question asked of the vision model.")
    profile_name: str | None = Field(
        default=None, description="Vision-capable profile used for inspection."
    )
    model: str | None = Field(default=None, description="Vision-capable model used.")
    base_url: str | None = Field(default=None, description="Vision-capable LLM endpoint used.")
    answer: str | None = Field(default=None, description="Text answer of the vision model.")


class ConsultAdvisorAction(Action):
    kind: Literal["ConsultAdvisorAction"] = "ConsultAdvisorAction"
    question: str = Field(
        default="",
        max_length=10_000,
        description="What you want advice on. Empty: a review of your progress and next steps.",
    )


class ConsultAdvisorObservation(Observation):
    kind: Literal["ConsultAdvisorObservation"] = "ConsultAdvisorObservation"
    advice: str = Field(default="", description="The advisor's answer.")
    profile_name: str = Field(description="The saved LLM profile that advised.")
    model: str | None = Field(default=None, description="The advisor's model.")


class SleeptimeComputeAction(Action):
    kind: Literal["SleeptimeComputeAction"] = "SleeptimeComputeAction"
    focus: str | None = Field(
        default=None,
        max_length=2000,
        exclude_if=lambda v: v is None,
        description="Optional: what the reflection should pay most attention to.",
    )


class SleeptimeComputeObservation(Observation):
    kind: Literal["SleeptimeComputeObservation"] = "SleeptimeComputeObservation"
    message: str = Field(default="", description="What was scheduled, and where it will go.")
    sessions_processed: int = Field(
        default=0, description="Reflections this conversation completed before this call."
    )


__all__ = [
    "ConsultAdvisorAction",
    "ConsultAdvisorObservation",
    "SleeptimeComputeAction",
    "SleeptimeComputeObservation",
    "SwitchLLMAction",
    "SwitchLLMObservation",
    "VisionInspectAction",
    "VisionInspectObservation",
]
