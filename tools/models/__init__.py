"""Tools that work through other models: switch_llm, vision_inspect, consult_advisor and
sleeptime_compute. They reach the conversation's LLM, its saved profiles and its history only
through `tools.conversation` (Models, History, IdleJobs)."""

from __future__ import annotations

from tools.base import single
from tools.models.advisor import AdvisorParams, ConsultAdvisorTool
from tools.models.sleeptime import SleeptimeComputeTool, SleeptimeParams
from tools.models.switch_llm import SwitchLLMTool
from tools.models.vision_inspect import VisionInspectTool, VisionParams

SWITCH_LLM_TOOL_SET = single(SwitchLLMTool)
VISION_TOOL_SET = single(VisionInspectTool, VisionParams)
ADVISOR_TOOL_SET = single(ConsultAdvisorTool, AdvisorParams)
SLEEPTIME_TOOL_SET = single(SleeptimeComputeTool, SleeptimeParams)

__all__ = ["ADVISOR_TOOL_SET", "SLEEPTIME_TOOL_SET", "SWITCH_LLM_TOOL_SET", "VISION_TOOL_SET"]
