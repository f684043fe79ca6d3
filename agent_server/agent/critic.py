"""Critic: scores the agent's finishes and messages with a CriticResult (SPEC 2.7), when the
agent's spec names one (`agent.critic`; off by default).

A ModelCritic asks a language model, with a fixed prompt, for a score from 0 to 1 and a reason;
a CommandCritic runs a command in the workspace with the judged content as JSON on stdin and
reads `{"score", "message", "metadata"}` from its stdout. The OpenHands SDK's local critics
score without either: PassCritic 1; EmptyPatchCritic 1 when the workspace's repositories have
changes (a non-empty patch); AgentFinishedCritic 1 when they do and the last action is
`finish`. Either way the result's metadata
names the events the critic read (`event_ids`: the model's view of the conversation so far)
and the response judged (`llm_response_id`).

The score is taken *before* the judged event is stored, and goes into the log with it. The
event log is append-only: a stored event is final (sockets, the webhook and searches have seen
it), and SPEC 6.2 puts `critic_result` on the ActionEvent or MessageEvent itself, so a score
that arrived later could only go into a second event and the field would stay null. The price
is that the event waits for its critic; that wait is bounded by the critic's `timeout`.

A critic never stops the agent: an error, a timeout or an answer that is not a score leaves
the event without a critic_result and logs a warning (masked: a critic's output may hold a
secret of the workspace).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_server import git
from agent_server.agent.condenser import render
from agent_server.agent.llm import LLMFailure
from agent_server.agent.spec import (
    AgentFinishedCritic,
    CommandCritic,
    CriticSpec,
    EmptyPatchCritic,
    ModelCritic,
    PassCritic,
)
from agent_server.agent.view import View
from core.masking import Masker
from core.processes import child_env, run_process
from events import ActionEvent, CriticResult, Event, MessageEvent
from events.content import text_of

if TYPE_CHECKING:
    from agent_server.agent.model import Model

logger = logging.getLogger(__name__)

#: Characters of the conversation a critic reads at most (the middle is cut when longer).
TRANSCRIPT_LIMIT = 100_000
#: Characters of the JSON a command critic gets on stdin at most (older messages left out).
PAYLOAD_LIMIT = 1024 * 1024
#: Bytes of a command critic's stdout and stderr read.
OUTPUT_LIMIT = 64 * 1024
#: Characters of a critic's message kept, and of its metadata (as JSON).
MESSAGE_LIMIT = 2000
METADATA_LIMIT = 16 * 1024

PROMPT = """\
You are a critic of an AI coding agent. Read the conversation between the user and the agent \
and the agent's latest output, then judge how likely it is that the agent has done what the \
user asked, correctly and completely. Reply with one JSON object and nothing else: \
{"score": <a number from 0 to 1, the probability of success>, "message": "<one or two \
sentences saying why>"}"""


class CriticFailed(Exception):
    """The critic gave no usable score; the text says why (masked before it is logged)."""


class Critic:
    """The critic of one conversation (a spec of None: no critic, nothing is judged)."""

    def __init__(
        self,
        spec: CriticSpec | None,
        model: Model,
        conversation_id: str,
        working_dir: Path,
        secrets: Mapping[str, str],
        masker: Masker,
    ) -> None:
        self.spec = spec
        self.model = model
        self.conversation_id = conversation_id
        self.working_dir = working_dir
        #: The conversation's live secrets: a command critic sees them as a hook does.
        self.secrets = secrets
        self.masker = masker

    def wants(self, event: Event) -> bool:
        """Whether the critic judges this event: each finish and agent message, or (mode
        all_actions) every action too. An action that cannot run is never judged."""
        if self.spec is None:
            return False
        if isinstance(event, MessageEvent):
            return event.source == "agent"
        if isinstance(event, ActionEvent) and event.action is not None:
            return self.spec.mode == "all_actions" or event.tool_name == "finish"
        return False

    async def score(self, events: Sequence[Event], view: View) -> None:
        """Give each event the critic judges its critic_result, in place, before it is stored.

        The events of one response share the view before them, so what is read from it
        (the history, masked and rendered) is built once for all of them."""
        seen: Seen | None = None
        for event in events:
            if self.wants(event):
                assert isinstance(event, (ActionEvent, MessageEvent))
                seen = seen or Seen(view, self.masker)
                event.critic_result = await self.judge(event, seen)

    async def judge(self, event: ActionEvent | MessageEvent, seen: Seen) -> CriticResult | None:
        """The critic's verdict on `event`, given the model's view before it; None on failure."""
        spec = self.spec
        if spec is None:
            return None
        ids = seen.ids
        subject = self.masker.data(_subject(event))
        try:
            if isinstance(spec, ModelCritic):
                async with asyncio.timeout(spec.timeout):
                    found = await self._ask_model(spec, seen.transcript(), subject)
            elif isinstance(spec, CommandCritic):
                found = await self._run_command(spec, seen.messages(), ids, subject)
            else:
                async with asyncio.timeout(git.TIMEOUT):
                    found = await self._local(spec, event, seen)
        except TimeoutError:
            self._warn(f"no answer within {getattr(spec, 'timeout', git.TIMEOUT):g}s")
            return None
        except CriticFailed as exc:
            self._warn(str(exc))
            return None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the critic's failure is never the agent's
            self._warn(f"{type(exc).__name__}: {exc}")
            return None
        score, message, metadata = found
        metadata = {
            **metadata,
            "event_ids": ids,
            "critic": spec.kind,
            "llm_response_id": event.llm_response_id,
        }
        return CriticResult(score=score, message=message, metadata=metadata)

    def _warn(self, why: str) -> None:
        logger.warning(
            "critic of conversation %s gave no result: %s",
            self.conversation_id,
            self.masker.text(why)[:500],
        )

    async def _ask_model(
        self, spec: ModelCritic, transcript: str, subject: dict[str, Any]
    ) -> tuple[float, str | None, dict[str, Any]]:
        request = (
            f"<CONVERSATION>\n{transcript}\n</CONVERSATION>\n\n"
            f"<LATEST_OUTPUT>\n{json.dumps(subject, ensure_ascii=False)}\n</LATEST_OUTPUT>"
        )
        llm = spec.llm.model_copy(update={"stream": False})
        try:
            reply = await self.model.complete(
                llm,
                [
                    {"role": "system", "content": PROMPT},
                    {"role": "user", "content": request},
                ],
                tools=[],
            )
        except LLMFailure as failure:
            raise CriticFailed(f"{failure.code}: {failure.detail}") from None
        return parse_verdict(reply.content)

    async def _local(
        self,
        spec: PassCritic | EmptyPatchCritic | AgentFinishedCritic,
        event: ActionEvent | MessageEvent,
        seen: Seen,
    ) -> tuple[float, str | None, dict[str, Any]]:
        """The SDK's local critics, with its messages; the patch is the workspace's changes."""
        if isinstance(spec, PassCritic):
            return 1.0, "PassCritic always succeeds", {}
        changes, _ = await git.changes(self.working_dir)
        if not changes:
            if isinstance(spec, EmptyPatchCritic):
                return 0.0, "Git patch is empty or missing", {}
            return 0.0, "Agent did not produce a non-empty git patch. Empty git patch", {}
        if isinstance(spec, EmptyPatchCritic):
            return 1.0, "Git patch is non-empty", {}
        if not _finished(event, seen.history):
            return 0.0, "Agent did not finish properly. No FinishAction found", {}
        return 1.0, "Agent completed with FinishAction and non-empty patch", {}

    async def _run_command(
        self, spec: CommandCritic, messages: dict[str, Any], ids: list[str], subject: dict[str, Any]
    ) -> tuple[float, str | None, dict[str, Any]]:
        # `subject` and `messages` are masked already; ids and the conversation's id are ours.
        payload = {
            "conversation_id": self.conversation_id,
            "subject": subject,
            "event_ids": ids,
            **messages,
        }
        stdin = json.dumps(payload, ensure_ascii=False).encode()
        env = child_env(self.secrets, {"AGENT_SERVER_CONVERSATION_ID": self.conversation_id})
        try:
            done = await run_process(
                ["/bin/sh", "-c", spec.command],
                self.working_dir,
                env,
                spec.timeout,
                OUTPUT_LIMIT,
                stdin=stdin,
            )
        except OSError as exc:
            raise CriticFailed(f"could not start the command: {exc}") from None
        if done.timed_out:
            raise TimeoutError
        if done.exit_code != 0:
            err = done.stderr.head.decode(errors="replace").strip()
            raise CriticFailed(f"the command exited with {done.exit_code}: {err[:300]}")
        return parse_verdict(done.stdout.head.decode(errors="replace"), strict=True)


class Seen:
    """The model's view before the judged events, as the critics read it: built on first use
    and once for all the events of one response (the history is the conversation so far)."""

    def __init__(self, view: View, masker: Masker) -> None:
        self.history = view.request()
        self.masker = masker
        #: The ids of the events the view's messages came from.
        self.ids = [source for m in self.history for source in view.sources(m) if source]
        self._transcript: str | None = None
        self._messages: dict[str, Any] | None = None

    def transcript(self) -> str:
        """The conversation after the system prompt, rendered, masked and cut (a model's)."""
        if self._transcript is None:
            self._transcript = _cut_middle(
                self.masker.text(render(self.history[1:])), TRANSCRIPT_LIMIT
            )
        return self._transcript

    def messages(self) -> dict[str, Any]:
        """`messages` and `messages_omitted` of a command's stdin, masked."""
        if self._messages is None:
            self._messages = self.masker.data(_latest(self.history, PAYLOAD_LIMIT))
        return self._messages


def _finished(event: ActionEvent | MessageEvent, history: list[dict[str, Any]]) -> bool:
    """Whether the agent's last action (the judged event, or the latest before it) is finish."""
    if isinstance(event, ActionEvent):
        return event.tool_name == "finish"
    for message in reversed(history):
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if calls:
            return bool(calls[-1].get("function", {}).get("name") == "finish")
    return False


def _subject(event: ActionEvent | MessageEvent) -> dict[str, Any]:
    """What is judged, as the critic reads it."""
    if isinstance(event, MessageEvent):
        return {"kind": "message", "text": text_of(event.llm_message.content)}
    try:
        arguments: Any = json.loads(event.tool_call.arguments)
    except ValueError:
        arguments = event.tool_call.arguments
    return {
        "kind": "finish" if event.tool_name == "finish" else "action",
        "tool_name": event.tool_name,
        "arguments": arguments,
        "thought": text_of(event.thought),
    }


def parse_verdict(text: str, strict: bool = False) -> tuple[float, str | None, dict[str, Any]]:
    """(score, message, metadata) from a critic's answer: a JSON object with `score` (0 to 1),
    `message` and (optionally) `metadata`. A model may wrap the object in prose or a code fence,
    or answer with a bare number; a command (`strict`) prints the object alone."""
    body = text.strip()
    if not strict:
        found = re.search(r"\{.*\}", body, re.DOTALL)
        body = found.group(0) if found else body
    try:
        data = json.loads(body)
    except ValueError:
        raise CriticFailed(f"the answer is not JSON: {text[:200]!r}") from None
    if not strict and isinstance(data, (int, float)):
        data = {"score": data}
    if not isinstance(data, dict):
        raise CriticFailed("the answer is not a JSON object with a score")
    score = data.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 1:
        raise CriticFailed(f"score must be a number from 0 to 1, not {score!r}")
    message = data.get("message")
    message = message[:MESSAGE_LIMIT] if isinstance(message, str) else None
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
    elif len(json.dumps(metadata, default=str)) > METADATA_LIMIT:
        metadata = {"metadata_dropped": f"over {METADATA_LIMIT} characters"}
    return float(score), message, metadata


def _cut_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def _latest(messages: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    """`messages` (the view's), or the first and as many of the latest as fit in `limit`
    characters of JSON, with how many were left out between."""
    sizes = [len(json.dumps(m, default=str)) for m in messages]
    if sum(sizes) <= limit or len(messages) < 2:
        return {"messages": messages, "messages_omitted": 0}
    room, tail = limit - sizes[0], len(messages)
    while tail > 1 and room - sizes[tail - 1] >= 0:
        tail -= 1
        room -= sizes[tail]
    return {"messages": [messages[0], *messages[tail:]], "messages_omitted": tail - 1}
