"""What the bridge reads of the event schema: the event kinds and the tool payloads it shows.

The one place the bridge imports the schema (`events`, SPEC 6); every other module of the
package imports these names from here. The tool payloads are the schema's too
(`events.tools`): the bridge reads them without loading any tool's code.
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
from events.status import RESTING
from events.tools.always import FinishAction, FinishObservation, ThinkAction, ThinkObservation
from events.tools.apply_patch import ApplyPatchObservation
from events.tools.base import Action, Observation
from events.tools.file_editor import FileEditorAction, FileEditorObservation
from events.tools.gemini import (
    EditAction,
    EditObservation,
    ReadFileAction,
    WriteFileAction,
    WriteFileObservation,
)
from events.tools.task_tracker import TaskTrackerAction, TaskTrackerObservation
from events.tools.terminal import TerminalAction, TerminalObservation

__all__ = [
    "RESTING",
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
