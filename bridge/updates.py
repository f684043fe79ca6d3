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

What a tool call is called and how it ends, and the calls a session remembers, are
`toolcalls`'s; this module decides which update each event makes and carries the rest: text
and reasoning, plans, a file change as a diff and its write-back. Everything kept is bounded:
the tool calls remembered, the texts and raw values sent.
"""

from __future__ import annotations

import os
import posixpath
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import acp
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    PlanEntry,
    ToolCallLocation,
    UserMessageChunk,
)

from bridge.schema import (
    ACPToolCallEvent,
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
    message,
    raw,
    text_content,
    text_of,
    thought,
)
from bridge.toolcalls import Call, Calls, CallUpdate, describe
from core.masking import MASK

Update: TypeAlias = (
    AgentMessageChunk | AgentThoughtChunk | UserMessageChunk | CallUpdate | AgentPlanUpdate
)

#: Execution statuses at which a run has ended (waiting for confirmation is not one).
ENDED = frozenset({"idle", "paused", "finished", "error", "stuck"})

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


class Translator:
    """One session's translation: it remembers what the updates depend on (the tool calls
    shown, the text streamed ahead of the stored events, the responses whose text was sent),
    so each event is translated in the light of those before it and no text is sent twice."""

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
        #: The tool calls shown, for their ends and for what waits for confirmation.
        self.calls = Calls()
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
        return self.calls.pending()

    def _end(
        self,
        event: ObservationEvent | AgentErrorEvent | UserRejectObservation,
        failed: bool,
        content: list[Content],
        raw_output: Any = None,
        locations: list[ToolCallLocation] | None = None,
    ) -> list[Update]:
        """The end of the event's tool call (`Calls.end`)."""
        ended = self.calls.end(
            event.tool_call_id, event.tool_name, failed, content, raw_output, locations
        )
        return [*ended]

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
            return self._end(event, True, text_content(event.error)), []
        if isinstance(event, UserRejectObservation):
            return self._end(event, True, text_content(f"Rejected: {event.rejection_reason}")), []
        if isinstance(event, ACPToolCallEvent):
            return [*self.calls.external(event)], []
        if isinstance(event, ConversationErrorEvent):
            return [message(f"\n\n**Error** ({event.code}): {cut(event.detail)}\n")], []
        if (
            isinstance(event, ConversationStateUpdateEvent)
            and event.key == "execution_status"
            and event.value in ENDED
        ):
            return [*self.calls.settle()], []
        if isinstance(event, HookExecutionEvent) and event.blocked:
            return [
                thought(
                    f"A {event.hook_event_type} hook blocked this"
                    + (f": {cut(event.reason)}" if event.reason else "")
                    + "\n"
                )
            ], []
        return [], []

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
            self.calls.remember(Call(event.tool_call_id, "finish", "other", done=True))
            return out + ([message(cut(action.message))] if action.message.strip() else [])
        if isinstance(action, ThinkAction):
            self.calls.remember(Call(event.tool_call_id, "think", "think", done=True))
            return out + [thought(cut(action.thought))]
        kind, title, path = describe(event.tool_name, action, event.summary, self.editor_path)
        self.calls.remember(Call(event.tool_call_id, title, kind))
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
            ended = self._end(event, obs.is_error, text_content(obs.text) if obs.is_error else [])
            return [AgentPlanUpdate(session_update="plan", entries=entries), *ended], []
        if isinstance(obs, TerminalObservation):
            output = obs.text
            code = obs.exit_code
            text = f"```\n{cut(output)}\n```" if output.strip() else ""
            if code not in (None, 0, -1):
                text += f"\nexit code {code}"
            failed = obs.is_error or code not in (None, 0, -1)
            raw_output = {"exit_code": code, "output": cut(output, MAX_RAW // 2)}
            return self._end(event, failed, text_content(text), raw_output), []
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
            return self._end(event, False, content, locations=locations[:20]), writes
        return self._end(event, obs.is_error, text_content(obs.text)), []

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


__all__ = ["Translator", "Update", "WriteBack", "cut", "message", "thought"]
