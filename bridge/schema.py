"""What the bridge reads of the event schema: the event kinds and the tool payloads it shows.

The one place the bridge imports the schema (`events`, SPEC 6); every other module of the
package imports these names from here. The tool kinds come from `tools`, where the schema
builds its Action and Observation unions from; the bridge only reads them.
"""

from __future__ import annotations

from events import (
    ACPToolCallEvent,
    ActionEvent,
    AgentErrorEvent,
    ConversationErrorEvent,
    ConversationStateUpdateEvent,
    Event,
    HookExecutionEvent,
    ImageContent,
    MessageEvent,
    ObservationEvent,
    StreamingDeltaEvent,
    TextContent,
    UserRejectObservation,
    parse_event,
)
from tools.always import FinishAction, FinishObservation, ThinkAction, ThinkObservation
from tools.apply_patch.tool import ApplyPatchObservation
from tools.base import Action, Observation
from tools.file_editor import FileEditorAction, FileEditorObservation
from tools.gemini.edit import EditAction, EditObservation
from tools.gemini.read_file import ReadFileAction
from tools.gemini.write_file import WriteFileAction, WriteFileObservation
from tools.task_tracker import TaskTrackerAction, TaskTrackerObservation
from tools.terminal import TerminalAction, TerminalObservation

__all__ = [
    "ACPToolCallEvent",
    "Action",
    "ActionEvent",
    "AgentErrorEvent",
    "ApplyPatchObservation",
    "ConversationErrorEvent",
    "ConversationStateUpdateEvent",
    "EditAction",
    "EditObservation",
    "Event",
    "FileEditorAction",
    "FileEditorObservation",
    "FinishAction",
    "FinishObservation",
    "HookExecutionEvent",
    "ImageContent",
    "MessageEvent",
    "Observation",
    "ObservationEvent",
    "ReadFileAction",
    "StreamingDeltaEvent",
    "TaskTrackerAction",
    "TaskTrackerObservation",
    "TerminalAction",
    "TerminalObservation",
    "TextContent",
    "ThinkAction",
    "ThinkObservation",
    "UserRejectObservation",
    "WriteFileAction",
    "WriteFileObservation",
    "parse_event",
]
