"""Realistic conversation events for the logs tests and benches build: a SystemPromptEvent
first, then user messages, think/finish actions with their observations, agent messages and
state updates (bench/event_log.py, the event log's crash test child)."""

from __future__ import annotations

import json
import random

from events import (
    ActionEvent,
    ConversationStateUpdateEvent,
    Event,
    Message,
    MessageEvent,
    MessageToolCall,
    ObservationEvent,
    SystemPromptEvent,
    TextContent,
)
from events.tools.always import FinishAction, FinishObservation, ThinkAction, ThinkObservation
from tools.always import FinishTool, ThinkTool

WORDS = (
    "the agent reads the repository layout then edits the module adds a test runs the suite "
    "and reports what changed so that the user can review the diff before merging it"
).split()


def prose(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def system_prompt() -> SystemPromptEvent:
    return SystemPromptEvent(
        system_prompt=TextContent(text="You are a careful coding agent. " * 40, cache_prompt=True),
        tools=[ThinkTool.definition(), FinishTool.definition()],
        dynamic_context=TextContent(text="Working directory: /workspace/project"),
    )


def step(rng: random.Random, n: int, large: float = 0.0) -> list[Event]:
    """One model step: sometimes a user message, an action and its observation, a reply.
    A `large` share of the thoughts are 64 KiB long."""
    events: list[Event] = []
    if n % 5 == 0:
        events.append(
            MessageEvent(
                source="user",
                llm_message=Message(role="user", content=[TextContent(text=prose(rng, 5, 60))]),
            )
        )
    call_id = f"call_{n}"
    finish = n % 50 == 49
    thought = "x" * 65_536 if large and rng.random() < large else prose(rng, 10, 200)
    action = FinishAction(message=prose(rng, 5, 40)) if finish else ThinkAction(thought=thought)
    events.append(
        ActionEvent(
            thought=[TextContent(text=prose(rng, 5, 30))],
            reasoning_content=prose(rng, 0, 80) or None,
            action=action,
            tool_name="finish" if finish else "think",
            tool_call_id=call_id,
            tool_call=MessageToolCall(
                id=call_id,
                name="finish" if finish else "think",
                arguments=json.dumps(action.model_dump(exclude={"kind"})),
                origin="completion",
            ),
            llm_response_id=f"chatcmpl-{n}",
            summary=prose(rng, 5, 10),
        )
    )
    observation = FinishObservation if finish else ThinkObservation
    events.append(
        ObservationEvent(
            tool_name="finish" if finish else "think",
            tool_call_id=call_id,
            observation=observation(content=[TextContent(text="Your thought has been logged.")]),
            action_id=f"action_{n}",
        )
    )
    if n % 7 == 0:
        events.append(
            MessageEvent(
                source="agent",
                llm_message=Message(
                    role="assistant", content=[TextContent(text=prose(rng, 5, 80))]
                ),
                llm_response_id=f"chatcmpl-{n}",
            )
        )
    if n % 11 == 0:
        events.append(ConversationStateUpdateEvent(key="execution_status", value="running"))
    return events


class Source:
    """An endless, reproducible stream of conversation events."""

    def __init__(self, seed: int = 1, large: float = 0.0) -> None:
        self.rng = random.Random(seed)
        self.large = large
        self.n = 0
        self.buffer: list[Event] = []

    def take(self, count: int) -> list[Event]:
        while len(self.buffer) < count:
            self.buffer.extend(step(self.rng, self.n, self.large))
            self.n += 1
        out, self.buffer = self.buffer[:count], self.buffer[count:]
        return out
