"""Translator: a conversation's events -> ACP session updates (and files to write back).

Shapes follow the OpenHands CLI's ACP mode where it has one: the model's text is
`agent_message_chunk` (from the streamed deltas when there are any, else from the stored
message), its reasoning `agent_thought_chunk`; each action is a `tool_call` (kind, title,
locations, raw input) and its observation a `tool_call_update` (completed or failed, with its
content: a command's output as text, a file change as an ACP diff); the task tracker's list is
a `plan`. The `finish` and `think` tools are text, not tool calls.

Paths in events are the sandbox's; one under the conversation's working directory is shown
under the editor's instead (the same file when the bridge runs beside the sandbox). When the
sandbox works elsewhere and the editor lets the agent write files, a changed file whose new
text the event carries is written back to the editor (`WriteBack`), inside the editor's
directory and never in `.git`. The events are masked by the service: a text holding
`<secret-hidden>` is not written back, so a user's file never gets the mask instead of a
value.

Everything kept is bounded: the tool calls remembered, the texts and raw values sent.
"""

from __future__ import annotations

import os
import posixpath
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, cast, get_args

import acp
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    PlanEntry,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    UserMessageChunk,
)
from pydantic import TypeAdapter, ValidationError

from bridge.schema import (
    ACPToolCallEvent,
    Action,
    ActionEvent,
    AgentErrorEvent,
    ApplyPatchObservation,
    ConversationErrorEvent,
    ConversationStateUpdateEvent,
    EditObservation,
    Event,
    FileEditorObservation,
    FinishAction,
    FinishObservation,
    HookExecutionEvent,
    MessageEvent,
    Observation,
    ObservationEvent,
    StreamingDeltaEvent,
    TaskTrackerAction,
    TaskTrackerObservation,
    TerminalObservation,
    ThinkAction,
    ThinkObservation,
    UserRejectObservation,
    WriteFileObservation,
)
from bridge.texts import (
    MAX_RAW,
    MAX_TITLE,
    Content,
    consume,
    cut,
    grown,
    line,
    message,
    raw,
    text_content,
    text_of,
    thought,
)
from core.masking import MASK

Update: TypeAlias = (
    AgentMessageChunk
    | AgentThoughtChunk
    | UserMessageChunk
    | ToolCallStart
    | ToolCallProgress
    | AgentPlanUpdate
)
ToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]
_CONTENT: TypeAdapter[list[Content]] = TypeAdapter(list[Content])

#: Tool calls remembered (a session's long history keeps only the latest).
MAX_CALLS = 1000
#: Execution statuses at which a run has ended (waiting for confirmation is not one).
ENDED = frozenset({"idle", "paused", "finished", "error", "stuck"})

_KINDS: dict[str, ToolKind] = {
    "TerminalAction": "execute",
    "ReadFileAction": "read",
    "ListDirectoryAction": "read",
    "WriteFileAction": "edit",
    "EditAction": "edit",
    "ApplyPatchAction": "edit",
    "GlobAction": "search",
    "GrepAction": "search",
    "TaskTrackerAction": "think",
}
_PLAN_STATUS: dict[str, Literal["pending", "in_progress", "completed"]] = {
    "todo": "pending",
    "in_progress": "in_progress",
    "done": "completed",
}


@dataclass(frozen=True)
class WriteBack:
    """A file the agent changed in the sandbox, to be written in the editor (fs/write_text_file)."""

    path: str
    content: str


@dataclass
class Call:
    tool_call_id: str
    title: str
    kind: ToolKind
    done: bool = False


class Translator:
    def __init__(
        self, cwd: str, working_dir: str | None, write_back: bool, asking: bool = True
    ) -> None:
        #: The editor's working directory, and the conversation's in the sandbox.
        self.cwd = cwd
        #: Whether actions may wait for the editor's approval (they start `pending`), or run
        #: at once (`in_progress`); the session keeps it in step with the approval mode.
        self.asking = asking
        self.working_dir = working_dir
        self.write_back = (
            write_back
            and working_dir is not None
            and posixpath.normpath(working_dir) != posixpath.normpath(cwd)
        )
        self.calls: OrderedDict[str, Call] = OrderedDict()
        #: Text and reasoning streamed and not yet matched by a stored text: not sent twice.
        self._streamed = ""
        self._streamed_reasoning = ""
        #: LLM responses whose text was sent (the first action of a response carries it).
        self._responses: deque[str] = deque(maxlen=64)

    # -- paths -----------------------------------------------------------------------------

    def editor_path(self, path: str) -> str:
        """The editor's name of a sandbox path (itself when outside the working directory)."""
        root = self.working_dir
        if root is None:
            return path
        full = posixpath.normpath(path if posixpath.isabs(path) else posixpath.join(root, path))
        rel = posixpath.relpath(full, posixpath.normpath(root))
        if rel == "." or rel.startswith(".."):
            return full
        return posixpath.join(self.cwd, rel)

    def _written(self, path: str, text: str | None) -> list[WriteBack]:
        """The write-back of a changed file, when it is safe: the sandbox is not trusted, so
        nothing is written outside the editor's directory (symlinks of the editor's side
        resolved: the bridge runs beside the editor), nor in a `.git` directory (a hook
        there would run on the user's machine)."""
        if not self.write_back or text is None or MASK in text:
            return []
        shown = self.editor_path(path)
        root = os.path.realpath(self.cwd)
        inside = os.path.relpath(os.path.realpath(shown), root)
        if inside == "." or inside.split(os.sep)[0] == ".." or ".git" in inside.split(os.sep):
            return []
        return [WriteBack(shown, text)]

    # -- tool calls ------------------------------------------------------------------------

    def pending(self) -> list[Call]:
        """Tool calls started and not ended: what waits for confirmation, oldest first."""
        return [c for c in self.calls.values() if not c.done]

    def _remember(self, call: Call) -> None:
        self.calls[call.tool_call_id] = call
        self.calls.move_to_end(call.tool_call_id)
        while len(self.calls) > MAX_CALLS:
            self.calls.popitem(last=False)

    def _end(
        self,
        tool_call_id: str,
        tool_name: str,
        failed: bool,
        content: list[Content],
        raw_output: Any = None,
        locations: list[ToolCallLocation] | None = None,
    ) -> list[Update]:
        out: list[Update] = []
        call = self.calls.get(tool_call_id)
        if call is None:  # its action is older than what this session saw
            call = Call(tool_call_id, tool_name[:MAX_TITLE], "other")
            self._remember(call)
            out.append(
                acp.start_tool_call(tool_call_id, call.title, kind=call.kind, status="in_progress")
            )
        call.done = True
        out.append(
            acp.update_tool_call(
                tool_call_id,
                status="failed" if failed else "completed",
                content=content or None,
                raw_output=raw(raw_output),
                locations=locations,
            )
        )
        return out

    # -- events ----------------------------------------------------------------------------

    def translate(
        self, event: Event, show_user: bool = False
    ) -> tuple[list[Update], list[WriteBack]]:
        """The updates an event makes; `show_user`: a user's message is shown too (a replay,
        or a message the editor did not send)."""
        if isinstance(event, StreamingDeltaEvent):
            return self._delta(event), []
        if isinstance(event, MessageEvent):
            return self._message(event, show_user), []
        if isinstance(event, ActionEvent):
            return self._action(event), []
        if isinstance(event, ObservationEvent):
            return self._observation(event)
        if isinstance(event, AgentErrorEvent):
            return self._end(
                event.tool_call_id, event.tool_name, True, text_content(event.error)
            ), []
        if isinstance(event, UserRejectObservation):
            return self._end(
                event.tool_call_id,
                event.tool_name,
                True,
                text_content(f"Rejected: {event.rejection_reason}"),
            ), []
        if isinstance(event, ACPToolCallEvent):
            return self._acp_call(event), []
        if isinstance(event, ConversationErrorEvent):
            return [message(f"\n\n**Error** ({event.code}): {cut(event.detail)}\n")], []
        if (
            isinstance(event, ConversationStateUpdateEvent)
            and event.key == "execution_status"
            and event.value in ENDED
        ):
            return self._settle(), []
        if isinstance(event, HookExecutionEvent) and event.blocked:
            return [
                thought(
                    f"A {event.hook_event_type} hook blocked this"
                    + (f": {cut(event.reason)}" if event.reason else "")
                    + "\n"
                )
            ], []
        return [], []

    def _settle(self) -> list[Update]:
        """The run rests: calls it left without a result (an interrupt cut them short) end
        as failed, so none stays spinning nor is asked about at the next confirmation."""
        out: list[Update] = []
        for call in self.pending():
            call.done = True
            out.append(acp.update_tool_call(call.tool_call_id, status="failed"))
        return out

    def _delta(self, event: StreamingDeltaEvent) -> list[Update]:
        out: list[Update] = []
        if event.reasoning_content:
            self._streamed_reasoning = grown(self._streamed_reasoning, event.reasoning_content)
            out.append(thought(event.reasoning_content))
        if event.content:
            self._streamed = grown(self._streamed, event.content)
            out.append(message(event.content))
        return out

    def _stored_text(self, text: str, reasoning: str | None) -> list[Update]:
        """The text of a stored agent event, less what was streamed of it already."""
        out: list[Update] = []
        rest, self._streamed_reasoning = consume(reasoning or "", self._streamed_reasoning)
        if rest.strip():
            out.append(thought(cut(rest)))
        rest, self._streamed = consume(text, self._streamed)
        if rest.strip():
            out.append(message(cut(rest)))
        return out

    def _message(self, event: MessageEvent, show_user: bool) -> list[Update]:
        llm = event.llm_message
        if event.source == "user" or llm.role == "user":
            text = text_of(llm.content)
            return [acp.update_user_message_text(cut(text))] if show_user and text else []
        return self._stored_text(text_of(llm.content), llm.reasoning_content)

    def _action(self, event: ActionEvent) -> list[Update]:
        out: list[Update] = []
        if event.llm_response_id not in self._responses:
            self._responses.append(event.llm_response_id)
            out += self._stored_text(text_of(event.thought), event.reasoning_content)
        action = event.action
        if isinstance(action, FinishAction):
            self._remember(Call(event.tool_call_id, "finish", "other", done=True))
            return out + ([message(cut(action.message))] if action.message.strip() else [])
        if isinstance(action, ThinkAction):
            self._remember(Call(event.tool_call_id, "think", "think", done=True))
            return out + [thought(cut(action.thought))]
        kind, title, path = self._describe(event.tool_name, action, event.summary)
        self._remember(Call(event.tool_call_id, title, kind))
        locations = [ToolCallLocation(path=self.editor_path(path))] if path else None
        given = action.model_dump(mode="json", exclude={"kind"}) if action is not None else None
        status: Literal["pending", "in_progress"] = "pending" if self.asking else "in_progress"
        out.append(
            acp.start_tool_call(
                event.tool_call_id,
                title,
                kind=kind,
                status=status,
                locations=locations,
                raw_input=raw(given),
            )
        )
        return out

    def _describe(
        self, tool_name: str, action: Action | None, summary: str | None
    ) -> tuple[ToolKind, str, str | None]:
        """Kind, title and the file it is about, from the action's kind and fields."""
        if action is None:
            return "other", line(summary or tool_name), None
        fields = action.model_dump(exclude={"kind"})
        kind = _KINDS.get(action.kind, "fetch" if action.kind.startswith("Browser") else "other")
        path = fields.get("path") or fields.get("file_path") or fields.get("dir_path")
        path = path if isinstance(path, str) else None
        shown = self.editor_path(path) if path else ""
        if action.kind in ("FileEditorAction", "PlanningFileEditorAction"):
            command = fields.get("command")
            kind = "read" if command == "view" else "edit"
            verbs = {"view": "Read", "create": "Create", "undo_edit": "Undo the last edit of"}
            title = f"{verbs.get(str(command), 'Edit')} {shown}"
        elif action.kind == "TerminalAction":
            title = f"$ {line(str(fields.get('command', '')))}"
        elif isinstance(action, TaskTrackerAction):
            title = "Update the plan" if action.command == "plan" else "Read the plan"
        elif action.kind in ("GlobAction", "GrepAction"):
            verb = "Find files" if action.kind == "GlobAction" else "Search for"
            title = f"{verb} {line(str(fields.get('pattern', '')))}"
        elif path:
            named = {
                "ReadFileAction": "Read",
                "WriteFileAction": "Write",
                "EditAction": "Edit",
                "ListDirectoryAction": "List",
            }.get(action.kind, tool_name)
            title = f"{named} {shown}"
        elif action.kind == "ApplyPatchAction":
            title = "Apply a patch"
        else:
            title = summary or tool_name
        return kind, line(title) or tool_name, path

    def _observation(self, event: ObservationEvent) -> tuple[list[Update], list[WriteBack]]:
        obs = event.observation
        if isinstance(obs, (FinishObservation, ThinkObservation)):
            call = self.calls.get(event.tool_call_id)
            if call is not None:
                call.done = True
            return [], []
        if isinstance(obs, TaskTrackerObservation):
            entries = [
                PlanEntry(
                    content=cut(t.title, MAX_TITLE),
                    priority="medium",
                    status=_PLAN_STATUS.get(t.status, "pending"),
                )
                for t in obs.task_list
            ]
            ended = self._end(
                event.tool_call_id,
                event.tool_name,
                obs.is_error,
                text_content(obs.text) if obs.is_error else [],
            )
            return [AgentPlanUpdate(session_update="plan", entries=entries), *ended], []
        if isinstance(obs, TerminalObservation):
            output = obs.text
            code = obs.exit_code
            text = f"```\n{cut(output)}\n```" if output.strip() else ""
            if code not in (None, 0, -1):
                text += f"\nexit code {code}"
            failed = obs.is_error or code not in (None, 0, -1)
            return self._end(
                event.tool_call_id,
                event.tool_name,
                failed,
                text_content(text),
                {"exit_code": code, "output": cut(output, MAX_RAW // 2)},
            ), []
        changes = self._changes(obs)
        if changes and not obs.is_error:
            content: list[Content] = []
            writes: list[WriteBack] = []
            for path, old, new in changes:
                if new is None:  # too big to carry, or deleted
                    content += text_content(
                        f"{self.editor_path(path)} changed (too large to show here)"
                    )
                    continue
                content.append(acp.tool_diff_content(self.editor_path(path), new, old))
                writes += self._written(path, new)
            locations = [ToolCallLocation(path=self.editor_path(p)) for p, _, _ in changes]
            return self._end(
                event.tool_call_id, event.tool_name, False, content, locations=locations[:20]
            ), writes
        return self._end(
            event.tool_call_id, event.tool_name, obs.is_error, text_content(obs.text)
        ), []

    @staticmethod
    def _changes(obs: Observation) -> list[tuple[str, str | None, str | None]]:
        """(path, old text, new text) of each file an observation says it changed."""
        if isinstance(obs, FileEditorObservation):
            if obs.command == "view" or not obs.path:
                return []
            return [(obs.path, obs.old_content, obs.new_content)]
        if isinstance(obs, (EditObservation, WriteFileObservation)):
            return [(obs.file_path, obs.old_content, obs.new_content)] if obs.file_path else []
        if isinstance(obs, ApplyPatchObservation) and obs.commit is not None:
            return [
                (
                    change.move_path or path,
                    change.old_content,
                    None if change.type == "delete" else change.new_content,
                )
                for path, change in obs.commit.changes.items()
            ]
        return []

    def _acp_call(self, event: ACPToolCallEvent) -> list[Update]:
        """An external ACP agent's tool call, passed on in its own shape."""
        try:
            content = _CONTENT.validate_python(event.content) if event.content else None
        except ValidationError:
            content = None
        kind = cast(ToolKind, event.tool_kind if event.tool_kind in get_args(ToolKind) else "other")
        status = (
            event.status
            if event.status in ("pending", "in_progress", "completed", "failed")
            else None
        )
        if event.is_error:
            status = "failed"
        known = event.tool_call_id in self.calls
        call = Call(
            event.tool_call_id,
            line(event.title) or "tool",
            kind,
            done=status in ("completed", "failed"),
        )
        self._remember(call)
        if not known:
            return [
                acp.start_tool_call(
                    call.tool_call_id,
                    call.title,
                    kind=kind,
                    status=status,  # type: ignore[arg-type]
                    content=content,
                    raw_input=raw(event.raw_input),
                    raw_output=raw(event.raw_output),
                )
            ]
        return [
            acp.update_tool_call(
                call.tool_call_id,
                title=call.title,
                kind=kind,
                status=status,  # type: ignore[arg-type]
                content=content,
                raw_output=raw(event.raw_output),
            )
        ]


__all__ = ["Call", "Translator", "Update", "WriteBack", "cut", "message", "thought"]
