"""The tools an agent can be given, by the names `agent.tools` uses.

Each module holds one tool set: the code that runs its Action and Observation kinds, which
are the event schema's (`events.tools`). `action_types()` and `observation_types()` list the
kinds of the sets here in the order the schema's unions hold them (a test keeps them equal).
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel

from events.tools.mcp import MCPToolAction, MCPToolObservation
from events.tools.skills import InvokeSkillAction, InvokeSkillObservation
from tools import (
    apply_patch,
    browser,
    file_editor,
    gemini,
    models,
    planning_file_editor,
    search,
    subagents,
    task_tracker,
    terminal,
    workflow,
)
from tools.always import ALWAYS
from tools.base import Action, Observation, Tool, ToolContext, ToolError, ToolSet


def _browser_params() -> type[BaseModel]:
    from tools.browser.base import BrowserToolParams

    return BrowserToolParams


#: What `agent.tools[].name` may name.
TOOL_SETS: dict[str, ToolSet] = {
    s.name: s
    for s in (
        replace(terminal.TOOL_SET, params_model=lambda: terminal.TerminalParams),
        file_editor.TOOL_SET,
        task_tracker.TOOL_SET,
        replace(browser.TOOL_SET, params_model=_browser_params),
        apply_patch.TOOL_SET,
        search.GLOB_TOOL_SET,
        search.GREP_TOOL_SET,
        *gemini.TOOL_SETS,
        planning_file_editor.TOOL_SET,
        subagents.TASK_TOOL_SET,
        subagents.DELEGATE_TOOL_SET,
        workflow.TOOL_SET,
        models.SWITCH_LLM_TOOL_SET,
        models.VISION_TOOL_SET,
        models.ADVISOR_TOOL_SET,
        models.SLEEPTIME_TOOL_SET,
    )
}

#: The names the public OpenHands agent server gives the same tool sets (its class names).
ALIASES: dict[str, str] = {
    "ApplyPatchTool": "apply_patch",
    "GlobTool": "glob",
    "GrepTool": "grep",
    "ListDirectoryTool": "list_directory",
    "ReadFileTool": "read_file",
    "WriteFileTool": "write_file",
    "EditTool": "edit",
    "PlanningFileEditorTool": "planning_file_editor",
    "TaskToolSet": "task",
    "TaskTool": "task",
    "DelegateTool": "delegate",
    "WorkflowToolSet": "workflow",
    "WorkflowTool": "workflow",
    "SwitchLLMTool": "switch_llm",
    "VisionInspectTool": "vision_inspect",
    "inspect_image_with_vision": "vision_inspect",
    "SleeptimeComputeTool": "sleeptime_compute",
    "ConsultAdvisorTool": "consult_advisor",
}

#: Kinds that travel in events but belong to no tool set here (e.g. skills, MCP).
EXTRA_ACTION_TYPES: list[type[Action]] = [MCPToolAction, InvokeSkillAction]
EXTRA_OBSERVATION_TYPES: list[type[Observation]] = [MCPToolObservation, InvokeSkillObservation]


def action_types() -> list[type[Action]]:
    sets = [*ALWAYS, *TOOL_SETS.values()]
    return [t for s in sets for t in s.action_types] + EXTRA_ACTION_TYPES


def observation_types() -> list[type[Observation]]:
    sets = [*ALWAYS, *TOOL_SETS.values()]
    return [t for s in sets for t in s.observation_types] + EXTRA_OBSERVATION_TYPES


__all__ = [
    "ALIASES",
    "ALWAYS",
    "TOOL_SETS",
    "Action",
    "Observation",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolSet",
    "action_types",
    "observation_types",
]
