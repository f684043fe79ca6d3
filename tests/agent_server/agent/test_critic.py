"""agent_server.agent.critic: CriticResults on finishes and agent messages, in-process.

The command critics are real `sh` commands in the test's workspace; the model critic is
asked through the in-process ScriptedModel (test_critics_on_a_server.py asks the scripted LLM
server through litellm).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from agent_server.agent.critic import CriticFailed, parse_verdict
from agent_server.agent.model import Scripted
from agent_server.conversations import Conversation
from agent_server.record import SendMessage
from events import ActionEvent, MessageEvent, SystemPromptEvent
from events.status import ExecutionStatus as S
from tests.support.inprocess import InProcess, agent, events, new_conversation, run_ends

FINISH = ("finish", '{"message": "all done"}')
SECRET = "critic-sees-s3cret-value"


def command_critic(command: str, **extra: Any) -> dict[str, Any]:
    return {**agent(), "critic": {"kind": "CommandCritic", "command": command, **extra}}


async def run(
    srv: InProcess, tmp_path: Path, spec: dict[str, Any], *script: Scripted, **extra: Any
) -> Conversation:
    srv.model.script += script
    conv = await new_conversation(srv, tmp_path / "ws", agent=spec, **extra)
    await conv.send_message(
        SendMessage.model_validate(
            {"content": [{"type": "text", "text": "do the task"}], "run": True}
        )
    )
    await run_ends(conv)
    return conv


async def judged_history(conv: Conversation) -> list[str]:
    """Ids of the events the model's view held before the judged one: the system prompt
    and the user's message."""
    [system] = await events(conv, SystemPromptEvent)
    user = [e for e in await events(conv, MessageEvent) if e.source == "user"]
    return [system.id, *(e.id for e in user)]


async def test_a_command_critic_scores_the_finish(srv: InProcess, tmp_path: Path) -> None:
    critic = (
        "cat > critic-input.json; "
        'echo \'{"score": 0.75, "message": "looks right", "metadata": {"by": "script"}}\''
    )
    conv = await run(srv, tmp_path, command_critic(critic), Scripted(calls=[FINISH]))
    assert conv.status == S.FINISHED
    [finish] = await events(conv, ActionEvent)
    result = finish.critic_result
    assert result is not None
    assert (result.score, result.message) == (0.75, "looks right")
    history = await judged_history(conv)
    assert result.metadata == {
        "by": "script",
        "event_ids": history,
        "critic": "CommandCritic",
        "llm_response_id": finish.llm_response_id,
    }
    given = json.loads((tmp_path / "ws" / "critic-input.json").read_text())
    assert given["subject"] == {
        "kind": "finish",
        "tool_name": "finish",
        "arguments": {"message": "all done"},
        "thought": "",
    }
    assert given["event_ids"] == history
    assert given["conversation_id"] == conv.id
    assert [m["role"] for m in given["messages"]] == ["system", "user"]
    assert given["messages_omitted"] == 0


async def test_a_model_critic_scores_an_agent_message(srv: InProcess, tmp_path: Path) -> None:
    spec = {**agent(), "critic": {"kind": "ModelCritic", "llm": {"model": "scripted/critic"}}}
    conv = await run(
        srv,
        tmp_path,
        spec,
        Scripted(content="the answer is 42"),
        Scripted(content='Verdict: ```json\n{"score": 0.25, "message": "unsure"}\n```'),
    )
    assert conv.status == S.FINISHED
    [reply] = [e for e in await events(conv, MessageEvent) if e.source == "agent"]
    assert reply.critic_result is not None
    assert (reply.critic_result.score, reply.critic_result.message) == (0.25, "unsure")
    assert reply.critic_result.metadata["event_ids"] == await judged_history(conv)
    # The critic was asked with its own LLM, its fixed prompt, and the agent's answer.
    assert srv.model.configs[1].model == "scripted/critic"
    system, question = srv.model.requests[1]
    assert system["content"].startswith("You are a critic of an AI coding agent.")
    assert "the answer is 42" in question["content"] and "do the task" in question["content"]


async def test_no_critic_means_no_critic_result(srv: InProcess, tmp_path: Path) -> None:
    conv = await run(
        srv,
        tmp_path,
        agent(),
        Scripted(calls=[("think", '{"thought": "x"}')]),
        Scripted(calls=[FINISH]),
    )
    assert all(e.critic_result is None for e in await events(conv, ActionEvent))
    assert all(e.critic_result is None for e in await events(conv, MessageEvent))


async def test_by_default_only_finishes_and_messages_are_judged(
    srv: InProcess, tmp_path: Path
) -> None:
    critic = 'cat >/dev/null; echo \'{"score": 1, "message": null}\''
    conv = await run(
        srv,
        tmp_path,
        command_critic(critic),
        Scripted(calls=[("think", '{"thought": "x"}')]),
        Scripted(calls=[FINISH]),
    )
    think, finish = await events(conv, ActionEvent)
    assert think.critic_result is None
    assert finish.critic_result is not None and finish.critic_result.score == 1.0
    assert finish.critic_result.message is None


async def test_all_actions_mode_judges_every_action(srv: InProcess, tmp_path: Path) -> None:
    critic = 'cat >/dev/null; echo \'{"score": 0.5, "message": "meh"}\''
    conv = await run(
        srv,
        tmp_path,
        command_critic(critic, mode="all_actions"),
        Scripted(calls=[("think", '{"thought": "x"}')]),
        Scripted(calls=[FINISH]),
    )
    think, finish = await events(conv, ActionEvent)
    assert think.critic_result is not None and finish.critic_result is not None
    # The finish was judged later, with the think call and its result in view.
    assert len(finish.critic_result.metadata["event_ids"]) > len(
        think.critic_result.metadata["event_ids"]
    )


async def test_the_actions_of_one_response_are_judged_on_the_same_history(
    srv: InProcess, tmp_path: Path
) -> None:
    critic = "cat >> ../judged.jsonl; echo >> ../judged.jsonl; echo '{\"score\": 0.5}'"
    conv = await run(
        srv,
        tmp_path,
        command_critic(critic, mode="all_actions"),
        Scripted(calls=[("think", '{"thought": "first"}'), ("think", '{"thought": "second"}')]),
        Scripted(calls=[FINISH]),
    )
    first, second, finish = await events(conv, ActionEvent)
    assert first.critic_result is not None and second.critic_result is not None
    assert first.critic_result.metadata["event_ids"] == second.critic_result.metadata["event_ids"]
    lines = (tmp_path / "judged.jsonl").read_text().split("\n")
    judged = [json.loads(line) for line in lines if line.strip()]
    assert [j["subject"]["arguments"] for j in judged[:2]] == [
        {"thought": "first"},
        {"thought": "second"},
    ]
    assert judged[0]["messages"] == judged[1]["messages"]
    assert len(judged[2]["messages"]) > len(judged[1]["messages"])


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("cat >/dev/null; echo broken >&2; exit 3", "the command exited with 3: broken"),
        ("cat >/dev/null; echo 'fine, I guess'", "the answer is not JSON"),
        ("cat >/dev/null; echo '{\"score\": 1.5}'", "score must be a number from 0 to 1"),
        ("cat >/dev/null; echo '{\"score\": true}'", "score must be a number from 0 to 1"),
        (f"cat >/dev/null; echo {SECRET} >&2; exit 1", "<secret-hidden>"),
    ],
)
async def test_a_failing_critic_leaves_no_result_and_the_run_goes_on(
    srv: InProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture, command: str, why: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="agent_server.agent.critic"):
        conv = await run(
            srv,
            tmp_path,
            command_critic(command),
            Scripted(calls=[FINISH]),
            secrets={"TOKEN": SECRET},
        )
    assert conv.status == S.FINISHED
    [finish] = await events(conv, ActionEvent)
    assert finish.critic_result is None
    [warning] = [r for r in caplog.records if r.name == "agent_server.agent.critic"]
    assert warning.levelno == logging.WARNING
    assert why in warning.getMessage()
    assert SECRET not in warning.getMessage()


async def test_a_slow_critic_is_given_up_on_in_time(
    srv: InProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agent_server.agent.critic"):
        conv = await run(
            srv, tmp_path, command_critic("sleep 30", timeout=0.5), Scripted(calls=[FINISH])
        )
    assert time.monotonic() - started < 10
    assert conv.status == S.FINISHED
    [finish] = await events(conv, ActionEvent)
    assert finish.critic_result is None
    assert "no answer within 0.5s" in caplog.text


async def test_a_slow_or_failing_model_critic_does_not_stop_the_agent(
    srv: InProcess, tmp_path: Path
) -> None:
    spec = {
        **agent(),
        "critic": {"kind": "ModelCritic", "timeout": 0.3, "llm": {"model": "scripted/critic"}},
    }
    conv = await run(
        srv, tmp_path, spec, Scripted(content="first"), Scripted(content='{"score": 1}', delay=5)
    )
    assert conv.status == S.FINISHED
    [reply] = [e for e in await events(conv, MessageEvent) if e.source == "agent"]
    assert reply.critic_result is None

    conv = await run(
        srv, tmp_path, spec, Scripted(content="second"), Scripted(fail="AuthenticationError")
    )
    assert conv.status == S.FINISHED
    [reply] = [e for e in await events(conv, MessageEvent) if e.source == "agent"]
    assert reply.critic_result is None


@pytest.mark.parametrize(
    ("answer", "verdict"),
    [
        ('{"score": 0.8, "message": "ok"}', (0.8, "ok", {})),
        (
            'Here you go:\n{"score": 0, "message": "wrong", "metadata": {"k": 1}}',
            (0.0, "wrong", {"k": 1}),
        ),
        ("0.6", (0.6, None, {})),
        ('{"score": 1, "message": 5}', (1.0, None, {})),
    ],
)
def test_a_model_verdict_is_read_leniently(answer: str, verdict: tuple[Any, ...]) -> None:
    assert parse_verdict(answer) == verdict


@pytest.mark.parametrize(
    "answer",
    ["", "no idea", '{"message": "no score"}', '{"score": -0.1}', '{"score": "0.5"}', "[0.5]"],
)
def test_an_answer_without_a_score_is_a_failure(answer: str) -> None:
    with pytest.raises(CriticFailed):
        parse_verdict(answer)


def test_a_command_must_print_the_object_alone() -> None:
    with pytest.raises(CriticFailed):
        parse_verdict('score: {"score": 0.5}', strict=True)
    with pytest.raises(CriticFailed):
        parse_verdict("0.5", strict=True)
    assert parse_verdict(' {"score": 0.5}\n', strict=True) == (0.5, None, {})
