"""Side questions to an ACP agent (ask_agent), answered in a session of their own so the
conversation's session, its events and its status stay as they were.

The question goes to the agent's own copy of the conversation's session (`session/fork`, the
OpenHands SDK's way; unstable in the protocol) when the agent offers one, so the answer knows
all the agent knows. Otherwise it goes to a new session, with the conversation's last messages
(up to MAX_CONTEXT_CHARS) before it. Either way the side session changes nothing: its
permission requests are refused, its file writes and terminals too (`client.WorkspaceClient`).
Its text is collected up to MAX_ANSWER_CHARS; it is closed after (`session/close`) when the
agent offers that. At most MAX_SIDE_QUESTIONS are asked at once (more: 429).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import acp
from acp import RequestError
from acp.schema import AgentMessageChunk, UsageUpdate

from agent_server.agent.acp.client import SessionUpdate
from agent_server.agent.acp.messages import chunk_text
from agent_server.agent.acp.process import GONE, ACPFailure, AgentConnection, request_error
from agent_server.agent.acp.usage import ACPUsage, usd
from agent_server.agent.sink import EventSink
from agent_server.log import Query
from events import MessageEvent, TextContent, parse_event
from web.errors import LimitReached

#: An answer's text is kept up to this many characters.
MAX_ANSWER_CHARS = 50_000
#: The conversation's messages given to a new side session, the newest kept up to this.
MAX_CONTEXT_CHARS = 20_000
CONTEXT_MESSAGES = 50
#: Side questions one conversation's agent answers at once.
MAX_SIDE_QUESTIONS = 4

CONTEXT_PROMPT = """\
A side question about the conversation below (the latest messages between the user and you, \
from another session). Answer it from what you know; change nothing, run nothing.

{transcript}

The question:
{question}"""


class SideAnswer:
    """What the agent says in a side session."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._size = 0
        #: The session's cumulative cost (USD) last reported.
        self.cost = 0.0

    def add(self, update: SessionUpdate) -> None:
        if isinstance(update, UsageUpdate):
            if (cost := usd(update)) is not None:
                self.cost = cost
        elif isinstance(update, AgentMessageChunk):
            text = chunk_text(update.content)[: MAX_ANSWER_CHARS - self._size]
            if text:  # past the cap, nothing more is kept (not even empty parts)
                self._parts.append(text)
                self._size += len(text)

    def text(self) -> str:
        return "".join(self._parts).strip()


class SideSessions:
    """The side questions under way: their answers by session id."""

    def __init__(self) -> None:
        self.answers: dict[str, SideAnswer] = {}
        self.asked = 0

    def get(self, session_id: str) -> SideAnswer | None:
        return self.answers.get(session_id)


async def ask(
    link: AgentConnection,
    cwd: Path,
    question: str,
    sink: EventSink,
    sides: SideSessions,
    timeout: float,
    usage: ACPUsage,
) -> str:
    """The agent's answer, its figures counted in `usage`; ACPFailure when it fails, dies,
    or takes over `timeout` s."""
    if sides.asked >= MAX_SIDE_QUESTIONS:
        raise LimitReached(
            f"At most {MAX_SIDE_QUESTIONS} side questions at once: ask again when one is answered"
        )
    sides.asked += 1
    try:
        return await _ask(link, cwd, question, sink, sides.answers, timeout, usage)
    finally:
        sides.asked -= 1


async def _ask(
    link: AgentConnection,
    cwd: Path,
    question: str,
    sink: EventSink,
    sides: dict[str, SideAnswer],
    timeout: float,
    usage: ACPUsage,
) -> str:
    offered = link.opened.capabilities.session_capabilities
    spent_before = 0.0  # a fork's cumulative cost goes on from its source's
    try:
        if offered is not None and offered.fork is not None:
            forked = await link.conn.fork_session(
                session_id=link.session_id, cwd=str(cwd), mcp_servers=[]
            )
            session_id, text, spent_before = forked.session_id, question, usage.cost_seen
        else:
            opened = await link.conn.new_session(cwd=str(cwd), mcp_servers=[])
            session_id = opened.session_id
            text = CONTEXT_PROMPT.format(transcript=await transcript(sink), question=question)
        if session_id == link.session_id:
            raise ACPFailure(
                "ACPRequestError",
                "The ACP agent answered the side question's "
                "session/new with the conversation's own session.",
            )
        answer = sides[session_id] = SideAnswer()
        answered, asked_at = False, time.monotonic()
        try:
            response = await asyncio.wait_for(
                link.conn.prompt(session_id=session_id, prompt=[acp.text_block(text)]), timeout
            )
            answered = True
            usage.side(response, max(answer.cost - spent_before, 0.0), time.monotonic() - asked_at)
        finally:
            sides.pop(session_id, None)
            if not answered:  # timed out or abandoned: told to stop, it spends nothing more
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(link.conn.cancel(session_id=session_id), 2)
            if offered is not None and offered.close is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(link.conn.close_session(session_id=session_id), 2)
    except RequestError as exc:
        raise ACPFailure("ACPRequestError", request_error(exc)) from None
    except TimeoutError:
        raise ACPFailure(
            "ACPTimeout", f"The ACP agent did not answer within {timeout:g} s."
        ) from None
    except GONE:
        raise await link.crashed("answering a side question") from None
    return answer.text()


async def transcript(sink: EventSink) -> str:
    """The latest messages of the current branch, as `user:` and `agent:` paragraphs."""
    log = await sink.log()
    await log.drain()
    query = Query(kind="MessageEvent", branch=log.head, descending=True)
    lines, _ = log.search(query, CONTEXT_MESSAGES)
    kept: list[str] = []
    size = 0
    for line in lines:  # newest first
        event = parse_event(line)
        if not isinstance(event, MessageEvent) or event.source not in ("user", "agent"):
            continue
        said = "\n".join(c.text for c in event.llm_message.content if isinstance(c, TextContent))
        size += len(said)
        if size > MAX_CONTEXT_CHARS:
            break
        kept.append(f"{event.source}: {said}")
    return "\n\n".join(reversed(kept))
