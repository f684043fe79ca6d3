"""View: what the model sees, kept up to date from the log instead of rebuilt each step.

It subscribes to the conversation's log, so every event (the agent's, a user's message sent
over HTTP) reaches the model the same way. It also knows which tool calls still lack a
result, so a cut run can give them one and every request stays valid for every provider.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent_server.agent.responses import REASONING_ITEM
from events import (
    ActionEvent,
    AgentErrorEvent,
    Condensation,
    CondensationRequest,
    Event,
    HookExecutionEvent,
    ImageContent,
    MessageEvent,
    ObservationEvent,
    ReasoningItemModel,
    SystemPromptEvent,
    TextContent,
    UserRejectObservation,
    parse_event,
)
from events.content import text_of

ERROR_PREFIX = "[An error occurred during execution.]\n"
SUMMARY_PREFIX = "[Summary of the earlier part of this conversation]\n"


@dataclass
class Pending:
    """A tool call without a result yet."""

    action_id: str
    tool_call_id: str
    tool_name: str


def _blocks(items: Iterable[TextContent | ImageContent], vision: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, TextContent):
            block: dict[str, Any] = {"type": "text", "text": item.text}
            if item.cache_prompt:
                block["cache_control"] = {"type": "ephemeral"}
            out.append(block)
        elif vision:
            out.extend({"type": "image_url", "image_url": {"url": u}} for u in item.image_urls)
        else:
            out.append({"type": "text", "text": f"[{len(item.image_urls)} image(s) omitted]"})
    return out


class View:
    def __init__(self, vision: bool = False) -> None:
        self.vision = vision
        self.messages: list[dict[str, Any]] = []
        #: The events each message came from, by id() of the message (messages stay plain
        #: dicts, so a request needs no copy of them).
        self._sources: dict[int, list[str]] = {}
        self.pending: dict[str, Pending] = {}  # by tool_call_id, in call order
        self._response_id: str | None = None  # the assistant message tool calls join
        self.last_user_message_id: str | None = None
        #: A CondensationRequest arrived and no Condensation followed yet.
        self.condensation_requested = False
        #: Image URLs of the latest user message that had any (vision_inspect reads them,
        #: also when this view shows the model none).
        self.user_images: list[str] = []

    def load(self, lines: Iterable[bytes]) -> None:
        for line in lines:
            self.add(parse_event(line))

    def on_events(self, written: Sequence[tuple[Event, bytes]]) -> None:
        for event, _ in written:
            self.add(event)

    def add(self, event: Event) -> None:
        if isinstance(event, ActionEvent):
            self._add_action(event)
            return
        self._response_id = None
        if isinstance(event, SystemPromptEvent):
            blocks = [{"type": "text", "text": event.system_prompt.text}]
            if event.dynamic_context is not None:
                blocks.append({"type": "text", "text": event.dynamic_context.text})
            self.messages.append(self._from({"role": "system", "content": blocks}, event))
        elif isinstance(event, MessageEvent):
            self._add_message(event)
        elif isinstance(event, ObservationEvent):
            obs = event.observation
            text = obs.text if hasattr(obs, "text") else ""
            if getattr(obs, "is_error", False):
                text = ERROR_PREFIX + text
            text += "".join("\n" + c.text for c in event.extended_content)
            self._add_result(event, text)
        elif isinstance(event, AgentErrorEvent):
            self._add_result(event, f"Error: {event.error}")
        elif isinstance(event, HookExecutionEvent) and event.hook_event_type == "UserPromptSubmit":
            self._prompt_hook(event)
        elif isinstance(event, UserRejectObservation):
            self._add_result(event, f"Action rejected: {event.rejection_reason}")
        elif isinstance(event, Condensation):
            self._condense(event)
        elif isinstance(event, CondensationRequest):
            self.condensation_requested = True

    def _add_message(self, event: MessageEvent) -> None:
        msg = event.llm_message
        content = [*msg.content, *event.extended_content]
        if event.source != "agent":  # the user's, or a hook's feedback
            self.last_user_message_id = event.id
            images = [u for c in content if isinstance(c, ImageContent) for u in c.image_urls]
            if images:
                self.user_images = images
            self.messages.append(
                self._from({"role": "user", "content": _blocks(content, self.vision)}, event)
            )
            return
        out: dict[str, Any] = self._from({"role": "assistant", "content": text_of(content)}, event)
        self._reasoning(
            out, msg.reasoning_content, msg.thinking_blocks, msg.responses_reasoning_item
        )
        self.messages.append(out)

    def _prompt_hook(self, event: HookExecutionEvent) -> None:
        """A blocked user message leaves the model's view; added context joins it."""
        for i in range(len(self.messages) - 1, -1, -1):
            if self.sources(self.messages[i]) == [event.message_id]:
                if event.blocked:
                    self._sources.pop(id(self.messages[i]), None)
                    del self.messages[i]
                    if self.last_user_message_id == event.message_id:  # as if never sent
                        self.last_user_message_id = next(
                            (
                                self.sources(m)[0]
                                for m in reversed(self.messages)
                                if m["role"] == "user" and self.sources(m)
                            ),
                            None,
                        )
                elif event.additional_context:
                    self.messages[i]["content"].append(
                        {"type": "text", "text": event.additional_context}
                    )
                return

    def _add_action(self, event: ActionEvent) -> None:
        call = {
            "id": event.tool_call.id,
            "type": "function",
            "function": {"name": event.tool_call.name, "arguments": event.tool_call.arguments},
        }
        if self._response_id == event.llm_response_id and self.messages:
            self.messages[-1]["tool_calls"].append(call)
            self.sources(self.messages[-1]).append(event.id or "")
        else:
            text = text_of(event.thought)
            out: dict[str, Any] = self._from(
                {"role": "assistant", "content": text or None, "tool_calls": [call]}, event
            )
            self._reasoning(
                out, event.reasoning_content, event.thinking_blocks, event.responses_reasoning_item
            )
            self.messages.append(out)
            self._response_id = event.llm_response_id
        assert event.id is not None
        self.pending[event.tool_call_id] = Pending(event.id, event.tool_call_id, event.tool_name)

    @staticmethod
    def _reasoning(
        out: dict[str, Any],
        reasoning: str | None,
        blocks: Sequence[Any],
        item: ReasoningItemModel | None = None,
    ) -> None:
        if reasoning:
            out["reasoning_content"] = reasoning
        if blocks:
            out["thinking_blocks"] = [b.model_dump(exclude_none=True) for b in blocks]
        if item is not None:  # sent back as it came (agent.responses); chat calls drop it
            out[REASONING_ITEM] = item.model_dump()

    def _add_result(
        self, event: ObservationEvent | AgentErrorEvent | UserRejectObservation, text: str
    ) -> None:
        tool_call_id = event.tool_call_id
        if self.pending.pop(tool_call_id, None) is None:
            return  # a result for a call the model never saw: nothing to answer
        message = self._from(
            {
                "role": "tool",
                "tool_call_id": tool_call_id,
                "name": event.tool_name,
                "content": text,
            },
            event,
        )
        # A result goes right after its call's assistant message and the results already
        # there, even when a user message arrived meanwhile: providers insist on that order.
        at = len(self.messages)
        for i in range(len(self.messages) - 1, -1, -1):
            calls = self.messages[i].get("tool_calls") or ()
            if any(c["id"] == tool_call_id for c in calls):
                at = i + 1
                while at < len(self.messages) and self.messages[at]["role"] == "tool":
                    at += 1
                break
        self.messages.insert(at, message)

    def _condense(self, event: Condensation) -> None:
        """Forget the listed events; the summary takes their place at summary_offset."""
        forgotten = set(event.forgotten_event_ids)
        kept = []
        for m in self.messages:
            if forgotten.issuperset(self.sources(m)):
                self._sources.pop(id(m), None)
            else:
                kept.append(m)
        if event.summary is not None:
            at = min(
                event.summary_offset if event.summary_offset is not None else len(kept), len(kept)
            )
            kept.insert(
                at,
                self._from(
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": SUMMARY_PREFIX + event.summary}],
                    },
                    event,
                ),
            )
        self.messages = kept
        self.condensation_requested = False

    def request(self) -> list[dict[str, Any]]:
        """The messages of the next LLM request (a new list of the same message dicts)."""
        return list(self.messages)

    def sources(self, message: dict[str, Any]) -> list[str]:
        """Ids of the events a message of this view came from."""
        return self._sources.get(id(message), [])

    def _from(self, message: dict[str, Any], event: Event) -> dict[str, Any]:
        self._sources[id(message)] = [event.id or ""]
        return message

    def size(self) -> int:
        """Characters of the next request's messages (a cheap measure of its tokens)."""
        return len(json.dumps(self.request()))
