"""The tool calls an editor is shown: what each action is called, and how each call ends.

An agent's action becomes an ACP `tool_call`: a kind (the editor's icon and grouping: read,
edit, execute, ...), a title a person takes in at a glance (`$ make test`, `Edit src/a.py`)
and the file it is about. Its observation, or an error, or the user's rejection, ends the
call (`tool_call_update`, completed or failed). The calls shown are remembered (`Calls`) so
that an observation finds its call, a confirmation names the calls that wait, and a run that
comes to rest fails the calls it left open rather than leave them spinning. An external ACP
agent's tool calls arrive in the protocol's own shape and are passed on as they are.

This is kept apart from the translation of the rest (`updates`: text, reasoning, plans, file
diffs and write-backs) because it is the one part with a memory across events, and the one
the session asks of directly (what waits for confirmation). What is remembered is bounded
(`MAX_CALLS`): a long session keeps only its latest calls, and an observation whose action
was forgotten, or came before the session began, opens its call anew.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, cast, get_args

import acp
from acp.schema import ToolCallLocation, ToolCallProgress, ToolCallStart
from pydantic import TypeAdapter, ValidationError

from bridge.schema import ACPToolCallEvent, Action, TaskTrackerAction
from bridge.texts import MAX_TITLE, Content, line, raw

#: What a tool call sends: its start, and each update of it (its end included).
CallUpdate: TypeAlias = ToolCallStart | ToolCallProgress
ToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]
_CONTENT: TypeAdapter[list[Content]] = TypeAdapter(list[Content])

#: Tool calls remembered (a session's long history keeps only the latest).
MAX_CALLS = 1000

#: The kind of each action the title alone does not decide (browser actions are `fetch`).
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


@dataclass
class Call:
    """A tool call the editor was shown, and whether it has ended."""

    tool_call_id: str
    title: str
    kind: ToolKind
    done: bool = False


class Calls:
    """The tool calls of one session, oldest first, at most `MAX_CALLS` of them."""

    def __init__(self) -> None:
        self._calls: OrderedDict[str, Call] = OrderedDict()

    def __contains__(self, tool_call_id: object) -> bool:
        return tool_call_id in self._calls

    def get(self, tool_call_id: str) -> Call | None:
        return self._calls.get(tool_call_id)

    def pending(self) -> list[Call]:
        """Tool calls started and not ended: what waits for confirmation, oldest first."""
        return [c for c in self._calls.values() if not c.done]

    def remember(self, call: Call) -> None:
        self._calls[call.tool_call_id] = call
        self._calls.move_to_end(call.tool_call_id)
        while len(self._calls) > MAX_CALLS:
            self._calls.popitem(last=False)

    def end(
        self,
        tool_call_id: str,
        tool_name: str,
        failed: bool,
        content: list[Content],
        raw_output: Any = None,
        locations: list[ToolCallLocation] | None = None,
    ) -> list[CallUpdate]:
        """The call's end, completed or failed; started first when it is not known (its
        action is older than what this session saw)."""
        out: list[CallUpdate] = []
        call = self._calls.get(tool_call_id)
        if call is None:
            call = Call(tool_call_id, tool_name[:MAX_TITLE], "other")
            self.remember(call)
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

    def settle(self) -> list[CallUpdate]:
        """The run rests: calls it left without a result (an interrupt cut them short) end
        as failed, so none stays spinning nor is asked about at the next confirmation."""
        out: list[CallUpdate] = []
        for call in self.pending():
            call.done = True
            out.append(acp.update_tool_call(call.tool_call_id, status="failed"))
        return out

    def external(self, event: ACPToolCallEvent) -> list[CallUpdate]:
        """An external ACP agent's tool call, passed on in its own shape: started the first
        time it is seen, updated after."""
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
        known = event.tool_call_id in self._calls
        call = Call(
            event.tool_call_id,
            line(event.title) or "tool",
            kind,
            done=status in ("completed", "failed"),
        )
        self.remember(call)
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


def describe(
    tool_name: str,
    action: Action | None,
    summary: str | None,
    editor_path: Callable[[str], str],
) -> tuple[ToolKind, str, str | None]:
    """Kind, title and the file it is about (the sandbox's path), from the action's kind and
    fields; a title names the file as the editor does (`editor_path`)."""
    if action is None:
        return "other", line(summary or tool_name), None
    fields = action.model_dump(exclude={"kind"})
    kind = _KINDS.get(action.kind, "fetch" if action.kind.startswith("Browser") else "other")
    path = fields.get("path") or fields.get("file_path") or fields.get("dir_path")
    path = path if isinstance(path, str) else None
    shown = editor_path(path) if path else ""
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


__all__ = ["MAX_CALLS", "Call", "CallUpdate", "Calls", "ToolKind", "describe"]
