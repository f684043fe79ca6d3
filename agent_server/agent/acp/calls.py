"""ACP tool calls as ACPToolCallEvents (SPEC 6.2): each call's state merged from the agent's
`tool_call` and `tool_call_update` notifications (and its permission requests), every field
bounded before it is stored."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)
from pydantic import BaseModel

from events import ACPToolCallEvent, SecurityRisk

#: The JSON text of raw_input, raw_output and content is kept up to this many characters each.
MAX_FIELD_CHARS = 32_000
MAX_TITLE_CHARS = 500
#: Tool calls remembered in one turn; past this, the oldest finished ones are forgotten.
MAX_CALLS = 1000
#: Statuses after which a call changes no more.
FINISHED = ("completed", "failed")
#: Tool kinds that change nothing: what ConfirmRisky counts as low risk.
READ_ONLY_KINDS = ("read", "search", "think", "fetch")


@dataclass
class ToolCallState:
    tool_call_id: str
    title: str = ""
    status: str | None = None
    tool_kind: str | None = None
    raw_input: Any = None
    raw_output: Any = None
    content: list[Any] | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def risk(self) -> SecurityRisk:
        """ACP agents rate no risk: a call that only reads is LOW, any other UNKNOWN."""
        return SecurityRisk.LOW if self.tool_kind in READ_ONLY_KINDS else SecurityRisk.UNKNOWN

    def merge(self, update: ToolCallStart | ToolCallProgress | ToolCallUpdate) -> None:
        """What the notification says; what it leaves out stays as it was."""
        if update.title is not None:
            self.title = update.title[:MAX_TITLE_CHARS]
        if update.status is not None:
            self.status = str(update.status)
        if update.kind is not None:
            self.tool_kind = str(update.kind)
        if update.raw_input is not None:
            self.raw_input = bounded(update.raw_input)
        if update.raw_output is not None:
            self.raw_output = bounded(update.raw_output)
        if update.content is not None:
            content = [
                c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in update.content
            ]
            kept = bounded(content)
            self.content = kept if isinstance(kept, list) else [{"type": "text", "text": kept}]

    def event(self, status: str | None = None, is_error: bool | None = None) -> ACPToolCallEvent:
        status = status or self.status
        return ACPToolCallEvent(
            tool_call_id=self.tool_call_id,
            title=self.title or self.tool_call_id,
            status=status,
            tool_kind=self.tool_kind,
            raw_input=self.raw_input,
            raw_output=self.raw_output,
            content=self.content,
            is_error=status == "failed" if is_error is None else is_error,
        )


class ToolCalls:
    """The tool calls of the turn under way, by id."""

    def __init__(self) -> None:
        self._items: dict[str, ToolCallState] = {}

    def get(self, tool_call_id: str) -> ToolCallState:
        state = self._items.get(tool_call_id)
        if state is None:
            if len(self._items) >= MAX_CALLS:
                self._forget_one()
            state = self._items[tool_call_id] = ToolCallState(tool_call_id)
        return state

    def unfinished(self) -> list[ToolCallState]:
        return [s for s in self._items.values() if not s.finished]

    def end(self, status: str, why: str | None = None) -> list[ACPToolCallEvent]:
        """The calls of a turn that ended without finishing them, told as `status` (with
        `why` as their output when they have none)."""
        out = []
        for call in self.unfinished():
            call.status = status
            if why is not None and call.raw_output is None:
                call.raw_output = why
            out.append(call.event())
        return out

    def clear(self) -> None:
        self._items.clear()

    def _forget_one(self) -> None:
        victim = next((k for k, s in self._items.items() if s.finished), None)
        self._items.pop(victim if victim is not None else next(iter(self._items)))


def bounded(value: Any, limit: int = MAX_FIELD_CHARS) -> Any:
    """`value` when its JSON text fits in `limit` characters; otherwise that text cut (a long
    string is cut itself), with a note of how much there was."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, str):
        return value if len(value) <= limit else _cut(value, limit)
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
        return text if len(text) <= limit else _cut(text, limit)
    return value if len(text) <= limit else _cut(text, limit)


def _cut(text: str, limit: int) -> str:
    return f"{text[:limit]}\n[... {len(text) - limit:,} more characters cut]"


@dataclass
class PermissionWait:
    """A permission request of the agent waiting for the user's answer."""

    call: ToolCallState
    options: list[PermissionOption]
    answer: asyncio.Future[RequestPermissionResponse] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    #: The ACPToolCallEvent that shows what waits (a rejection names it as its action).
    event_id: str = ""

    def reply(self, response: RequestPermissionResponse) -> None:
        if not self.answer.done():
            self.answer.set_result(response)


def choose(options: list[PermissionOption], allow: bool) -> RequestPermissionResponse:
    """The agent's own option for allowing (once, else always) or rejecting; a rejection
    with no reject option is told as cancelled."""
    kinds = ("allow_once", "allow_always") if allow else ("reject_once", "reject_always")
    for kind in kinds:
        for option in options:
            if option.kind == kind:
                return RequestPermissionResponse(
                    outcome=AllowedOutcome(outcome="selected", option_id=option.option_id)
                )
    if allow and options:
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=options[0].option_id)
        )
    return cancelled()


def cancelled() -> RequestPermissionResponse:
    return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
