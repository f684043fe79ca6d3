"""The tools' payloads: what an ActionEvent's `action` and an ObservationEvent's `observation`
hold (SPEC 2.7, 6.2), one module per tool set (import a kind from its module), the bases in
`base`.

They sit in the schema, below the tools that run them, so that reading events (the control
plane, the editor bridge) never loads a tool's runtime. The unions below are the schema's list
of kinds, in the order `tools.action_types()` and `tools.observation_types()` give (a test
holds them equal): the tool sets' own kinds, then those that belong to no set (MCP, skills).
"""

from __future__ import annotations

from typing import TypeAlias, get_args

from events.tools.always import FinishAction, FinishObservation, ThinkAction, ThinkObservation
from events.tools.apply_patch import ApplyPatchAction, ApplyPatchObservation
from events.tools.base import Action, Observation
from events.tools.browser import AnyBrowserAction, BrowserObservation
from events.tools.file_editor import (
    FileEditorAction,
    FileEditorObservation,
    PlanningFileEditorAction,
    PlanningFileEditorObservation,
)
from events.tools.gemini import (
    EditAction,
    EditObservation,
    ListDirectoryAction,
    ListDirectoryObservation,
    ReadFileAction,
    ReadFileObservation,
    WriteFileAction,
    WriteFileObservation,
)
from events.tools.mcp import MCPToolAction, MCPToolObservation
from events.tools.models import (
    ConsultAdvisorAction,
    ConsultAdvisorObservation,
    SleeptimeComputeAction,
    SleeptimeComputeObservation,
    SwitchLLMAction,
    SwitchLLMObservation,
    VisionInspectAction,
    VisionInspectObservation,
)
from events.tools.search import GlobAction, GlobObservation, GrepAction, GrepObservation
from events.tools.skills import InvokeSkillAction, InvokeSkillObservation
from events.tools.subagents import DelegateAction, DelegateObservation, TaskAction, TaskObservation
from events.tools.task_tracker import TaskTrackerAction, TaskTrackerObservation
from events.tools.terminal import TerminalAction, TerminalObservation
from events.tools.workflow import WorkflowAction, WorkflowObservation

#: Every Action kind; the event schema discriminates it by `kind`.
AnyAction: TypeAlias = (
    FinishAction
    | ThinkAction
    | TerminalAction
    | FileEditorAction
    | TaskTrackerAction
    | AnyBrowserAction
    | ApplyPatchAction
    | GlobAction
    | GrepAction
    | ListDirectoryAction
    | ReadFileAction
    | WriteFileAction
    | EditAction
    | PlanningFileEditorAction
    | TaskAction
    | DelegateAction
    | WorkflowAction
    | SwitchLLMAction
    | VisionInspectAction
    | ConsultAdvisorAction
    | SleeptimeComputeAction
    | MCPToolAction
    | InvokeSkillAction
)
#: Every Observation kind.
AnyObservation: TypeAlias = (
    FinishObservation
    | ThinkObservation
    | TerminalObservation
    | FileEditorObservation
    | TaskTrackerObservation
    | BrowserObservation
    | ApplyPatchObservation
    | GlobObservation
    | GrepObservation
    | ListDirectoryObservation
    | ReadFileObservation
    | WriteFileObservation
    | EditObservation
    | PlanningFileEditorObservation
    | TaskObservation
    | DelegateObservation
    | WorkflowObservation
    | SwitchLLMObservation
    | VisionInspectObservation
    | ConsultAdvisorObservation
    | SleeptimeComputeObservation
    | MCPToolObservation
    | InvokeSkillObservation
)
ACTION_TYPES: tuple[type[Action], ...] = get_args(AnyAction)
OBSERVATION_TYPES: tuple[type[Observation], ...] = get_args(AnyObservation)

__all__ = [
    "ACTION_TYPES",
    "OBSERVATION_TYPES",
    "Action",
    "AnyAction",
    "AnyObservation",
    "Observation",
]
