"""What a conversation and its agent agree on, and nothing else: the agent's side of it is a
`Session`, built by a `SessionFactory` from narrow parts.

    ConversationSpec  who the agent is and where it works (fixed for the conversation's life)
    RunControl        what the user steers while the agent works (the conversation writes it)
    ToolServices      what every conversation's tools share (the composition root makes it)
    Session           what a conversation asks of any agent: open, run, reject, close
    AnsweringSession  one that answers side questions (ask_agent): both kinds here do
    SteeredSession    what it asks besides of our own agent, whose model, skills and hooks
                      run here (an ACP agent keeps its own)

The implementations (`agent.session.AgentSession`, `agent.acp.ACPSession`) import this module;
it imports neither, and the factory that picks one lives in the composition root.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agent_server.agent.active_llm import ActiveLLM
from agent_server.agent.policies import ConfirmationPolicy, HookConfig
from agent_server.agent.sink import EventSink
from agent_server.agent.skills import SkillList
from agent_server.agent.spec import ACPAgentSpec, AgentSpec
from agent_server.agent.usage import Metrics
from events import MessageEvent
from events.status import ExecutionStatus

if TYPE_CHECKING:
    from tools.base import NetworkNotes
    from tools.browser.manager import BrowserManager
    from tools.conversation import Subagents


@dataclass(frozen=True)
class ConversationSpec:
    """What the agent knows of its conversation; fixed for the conversation's life."""

    id: str
    working_dir: Path
    #: The conversation's private directory (tools keep their files under it).
    state_dir: Path
    agent: AgentSpec | ACPAgentSpec
    max_iterations: int = 500
    stuck_detection: bool = True
    hook_config: HookConfig | None = None
    #: GIT_AUTHOR_* and GIT_COMMITTER_* for the processes the tools start (SPEC 5 rule 5).
    git_author: Mapping[str, str] = field(default_factory=dict)


@dataclass
class RunControl:
    """What the user steers while the agent works: written by the conversation only, read by
    the agent. (Whether a run starts by carrying out approved actions is not here: it is an
    argument of `Session.run`, given by the conversation to the one run it starts.)"""

    confirmation_policy: ConfirmationPolicy
    #: The LLM in force (a switch by the agent or the user changes it for the next request).
    llm: ActiveLLM
    #: Set by a pause, cleared when a run starts; the agent stops between steps when it sees it.
    pause_requested: bool = False
    #: Held while a user message waits for its UserPromptSubmit verdict: a running agent
    #: takes no request meanwhile.
    prompt_gate: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(frozen=True)
class ToolServices:
    """What every conversation's tools share, made once by the composition root."""

    idle_timeout: float = 600.0
    #: The server's one Chromium (made on first call); None: no browser tools here.
    browser: Callable[[], BrowserManager] | None = None
    #: Sub-agents of a conversation, by its id (child conversations on this server); None:
    #: task, delegate and workflow say sub-agents are not available.
    subagents: Callable[[str], Subagents] | None = None
    #: What the sandbox's network policy refused (the server's one client of its control
    #: plane); None: no network boundary configured.
    network: NetworkNotes | None = None


class Session(Protocol):
    """What a conversation asks of its agent, whichever kind it is."""

    async def open(self) -> None:
        """The first events of a new conversation (or a 422 refusing the agent as given)."""
        ...

    async def run(self, approved: bool = False) -> ExecutionStatus:
        """One run until it ends; the status it ended in (the conversation applies it).
        `approved`: the actions waiting for confirmation were accepted, so the run carries
        them out first."""
        ...

    async def reject_pending(self, reason: str) -> None:
        """Reject what waits for confirmation."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class AnsweringSession(Session, Protocol):
    async def ask(self, question: str) -> str:
        """A side question, answered from what the agent knows without changing the
        conversation (its events, its status, the agent's own session)."""
        ...


@runtime_checkable
class SteeredSession(AnsweringSession, Protocol):
    """A session whose model, skills and hooks run in this server: the conversation passes it
    the user's messages, switches and questions too."""

    async def prepare_user_message(self, event: MessageEvent) -> None:
        """Before the message is stored: the skills its text activates."""
        ...

    async def on_user_message(self, event: MessageEvent) -> bool:
        """The message is stored; True when it is blocked (it starts no run)."""
        ...

    async def skills(self) -> SkillList: ...

    async def follow_llm(self) -> None:
        """The active LLM changed."""
        ...

    def forget_view(self) -> None:
        """HEAD moved to another branch."""
        ...


#: Builds the session of one conversation (the composition root supplies the model and the
#: tool services): the conversation's spec, its sink, its run control, its live secrets and
#: the metrics object it saves.
SessionFactory = Callable[
    [ConversationSpec, EventSink, RunControl, Mapping[str, str], Metrics], Session
]
