"""agent_server.agent.loop.Run built alone from its parts (RunParts), with no session, no
conversation and no server: a ScriptedModel, a real toolbox, a real event log and the view it
feeds, as mini-swe-agent tests `DefaultAgent(DeterministicModel, env)`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent_server.agent.active_llm import ActiveLLM
from agent_server.agent.condenser import Condenser
from agent_server.agent.contract import RunControl
from agent_server.agent.critic import Critic
from agent_server.agent.hooks import Hooks
from agent_server.agent.loop import Run, RunParts
from agent_server.agent.model import Scripted, ScriptedModel
from agent_server.agent.policies import AlwaysConfirm, NeverConfirm
from agent_server.agent.sink import EventSink
from agent_server.agent.spec import (
    AgentSpec,
    LLMConfig,
    ToolSpec,
)
from agent_server.agent.toolbox import Toolbox
from agent_server.agent.usage import Metrics
from agent_server.agent.view import View
from agent_server.log import EventLog
from agent_server.telemetry import Telemetry
from core.masking import Masker
from events import (
    ActionEvent,
    AgentErrorEvent,
    ConversationErrorEvent,
    Event,
    Message,
    MessageEvent,
    ObservationEvent,
    TextContent,
    parse_event,
)
from events.status import ExecutionStatus
from tools.base import ToolContext

THINK = ("think", '{"thought": "let me think"}')
FINISH = ("finish", '{"message": "all done"}')


def create(path: Path) -> tuple[str, str]:
    """A file_editor call that creates `path`: an action that changes the world."""
    return (
        "file_editor",
        json.dumps({"command": "create", "path": str(path), "file_text": "made\n"}),
    )


class Parts:
    """A run's parts over a log in a temporary directory; `make` builds a RunParts of them."""

    def __init__(self, tmp_path: Path, log: EventLog) -> None:
        self.log = log
        self.model = ScriptedModel()
        self.view = View()
        log.subscribe(self.view.on_events)  # as the session attaches its view
        self.published: list[Event] = []
        masker = Masker({})

        async def open_log() -> EventLog:
            return log

        self.sink = EventSink(open_log, self.published.append, masker)
        llm = LLMConfig(model="scripted/test")
        self.control = RunControl(
            confirmation_policy=NeverConfirm(), llm=ActiveLLM(llm, None, dict)
        )
        workspace = tmp_path / "ws"
        workspace.mkdir()
        ctx = ToolContext(
            conversation_id="run-alone", working_dir=workspace, state_dir=tmp_path / "tools"
        )
        self.workspace = workspace
        self.toolbox = Toolbox(
            ctx, AgentSpec(llm=llm, tools=[ToolSpec(name="file_editor")]), self.sink.append
        )
        self.hooks = Hooks(None, "run-alone", workspace, {}, self.sink.append)
        self.metrics = Metrics()
        self.sessions_started = 0
        self.telemetry = Telemetry.build().agent(masker.text)
        self.condenser = Condenser(None, lambda: self.control.llm.config, self.model)
        self.critic = Critic(None, self.model, "run-alone", workspace, {}, masker)

    async def start_session(self) -> None:
        self.sessions_started += 1

    def make(self, max_iterations: int = 20) -> RunParts:
        return RunParts(
            model=self.model,
            toolbox=self.toolbox,
            view=self.view,
            sink=self.sink,
            control=self.control,
            hooks=self.hooks,
            condenser=self.condenser,
            critic=self.critic,
            metrics=self.metrics,
            telemetry=self.telemetry,
            max_iterations=max_iterations,
            stuck_detection=True,
            start_session=self.start_session,
        )

    async def say(self, text: str) -> None:
        await self.sink.append(
            MessageEvent(
                source="user", llm_message=Message(role="user", content=[TextContent(text=text)])
            )
        )

    async def events(self, kind: type[Event] | None = None) -> list[Any]:
        await self.log.drain()
        parsed = [parse_event(line) for line in self.log.read(range(len(self.log)))]
        return [e for e in parsed if kind is None or isinstance(e, kind)]


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[Parts]:
    log = EventLog.open(tmp_path / "events.jsonl")
    try:
        yield Parts(tmp_path, log)
    finally:
        await log.drain()
        log.close()


async def test_a_run_calls_a_tool_then_finishes(parts: Parts) -> None:
    parts.model.script += [
        Scripted(content="first a thought", calls=[THINK]),
        Scripted(calls=[FINISH]),
    ]
    await parts.say("go")

    status = await Run(parts.make())()

    assert status == ExecutionStatus.FINISHED
    think, finish = await parts.events(ActionEvent)
    assert (think.tool_name, finish.tool_name) == ("think", "finish")
    assert think.thought[0].text == "first a thought"
    observations = await parts.events(ObservationEvent)
    assert [o.action_id for o in observations] == [think.id, finish.id]
    # The view, fed by the log alone, carried the call and its result to the second request.
    second = parts.model.requests[1]
    assert [m["tool_call_id"] for m in second if m["role"] == "tool"] == [think.tool_call_id]
    assert second[0] == {"role": "user", "content": [{"type": "text", "text": "go"}]}
    assert parts.metrics.response_count == 2
    assert parts.sessions_started == 1


async def test_a_pause_request_ends_the_run_before_it_asks_the_model(parts: Parts) -> None:
    await parts.say("go")
    parts.control.pause_requested = True

    assert await Run(parts.make())() == ExecutionStatus.PAUSED
    assert parts.model.requests == []


async def test_max_iterations_end_the_run_in_error(parts: Parts) -> None:
    parts.model.script += [
        Scripted(calls=[("think", f'{{"thought": "step {i}"}}')]) for i in range(5)
    ]
    await parts.say("go")

    assert await Run(parts.make(max_iterations=2))() == ExecutionStatus.ERROR
    [error] = await parts.events(ConversationErrorEvent)
    assert error.code == "MaxIterationsReached"
    assert len(parts.model.requests) == 2


async def test_approval_is_the_run_s_argument_and_carries_out_what_waited(parts: Parts) -> None:
    """What the conversation approved reaches the one run it starts, as an argument: the run
    reads no flag of the run control, and writes none."""
    target = parts.workspace / "made.txt"
    parts.control.confirmation_policy = AlwaysConfirm()
    parts.model.script += [Scripted(calls=[create(target)])]
    await parts.say("go")
    assert await Run(parts.make())() == ExecutionStatus.WAITING_FOR_CONFIRMATION
    [waiting] = await parts.events(ActionEvent)
    assert not target.exists()

    assert await Run(parts.make(), approved=True)() == ExecutionStatus.FINISHED
    assert target.read_text() == "made\n"
    [observation] = await parts.events(ObservationEvent)
    assert observation.action_id == waiting.id
    assert await parts.events(AgentErrorEvent) == []
    assert parts.sessions_started == 2  # the session, not the run, keeps whether it ran


async def test_a_run_not_approved_gives_what_waited_an_error_instead(parts: Parts) -> None:
    target = parts.workspace / "made.txt"
    parts.control.confirmation_policy = AlwaysConfirm()
    parts.model.script += [Scripted(calls=[create(target)])]
    await parts.say("go")
    assert await Run(parts.make())() == ExecutionStatus.WAITING_FOR_CONFIRMATION

    assert await Run(parts.make())() == ExecutionStatus.FINISHED
    [error] = await parts.events(AgentErrorEvent)
    assert error.error == "The previous run ended before this call finished."
    assert await parts.events(ObservationEvent) == []
    assert not target.exists()
