"""What a tool may ask of its conversation beyond the workspace: narrow seams, no HTTP, no log.

The tools that work through other agents or models (task, delegate, workflow, switch_llm,
vision_inspect, consult_advisor, sleeptime_compute) see their conversation only through these
protocols, set in their ToolContext by the agent session (`agent_server.agent.session`) and,
for sub-agents, by the composition root (`agent_server.subagents`). Where one is missing the
tool says so to the model instead of failing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

#: Largest text a sub-agent's result or a model's answer may bring back into the parent.
MAX_RESULT_CHARS = 20_000


def bounded(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters not shown]"


# -- sub-agents --------------------------------------------------------------------------------


class SubagentRefused(Exception):
    """The sub-agent could not be started (a limit, an unknown resume id); the message says
    why, for the model to read."""


@dataclass(frozen=True)
class SubagentTask:
    """One piece of work for a child conversation."""

    prompt: str
    #: Tool set names (as `agent.tools` names them) the child gets; a subset of the parent's.
    tools: tuple[str, ...]
    title: str | None = None
    #: A child conversation of this parent to continue instead of starting a new one.
    resume: str | None = None
    max_iterations: int = 100


@dataclass(frozen=True)
class SubagentResult:
    conversation_id: str
    #: The child's execution status when its run ended (finished, error, stuck, paused, ...).
    status: str
    #: Its final answer: the finish message, else its last message (masked, bounded).
    text: str

    @property
    def ok(self) -> bool:
        return self.status == "finished"


class Subagents(Protocol):
    """Child conversations of one parent conversation."""

    def depth(self) -> int:
        """How deep the parent is: 0 for a conversation nobody started, 1 for its child..."""
        ...

    def tool_names(self) -> list[str]:
        """The parent's tool set names (what a child may be given)."""
        ...

    def spawned(self) -> int:
        """Children this parent has made so far."""
        ...

    async def run(self, task: SubagentTask) -> SubagentResult:
        """Make (or resume) a child, run it to its end and return its result; raises
        SubagentRefused. Cancelling the call interrupts the child."""
        ...


# -- models and history ------------------------------------------------------------------------


@dataclass(frozen=True)
class ProfileInfo:
    """A saved LLM profile as a tool may show it (never its key)."""

    name: str
    model: str
    base_url: str | None = None
    #: Whether the profile's model reads images (None: unknown).
    vision: bool | None = None


class ProfileNotFound(KeyError):
    """No saved profile has that name."""


@dataclass(frozen=True)
class Answer:
    """A model's reply to a one-off question."""

    text: str
    model: str
    base_url: str | None = None


class Models(Protocol):
    """The conversation's LLM and the saved profiles it may use."""

    def profiles(self) -> list[ProfileInfo]: ...

    async def supports_vision(self, profile_name: str) -> bool: ...

    async def switch(self, profile_name: str, reason: str) -> ProfileInfo:
        """Use the profile from the next LLM request on (recorded as an event); raises
        ProfileNotFound."""
        ...

    async def ask(self, profile_name: str | None, messages: list[dict[str, Any]]) -> Answer:
        """One completion, without tools, by the profile (None: the conversation's own LLM);
        counted in the conversation's metrics. Raises ProfileNotFound, or RuntimeError when
        the call failed."""
        ...


class History(Protocol):
    """A read-only view of the conversation so far, secrets masked."""

    def transcript(self, max_chars: int) -> str:
        """The messages as plain text, oldest first, the middle cut to stay in `max_chars`."""
        ...

    def user_images(self) -> list[str]:
        """Image URLs of the latest user message that carries images."""
        ...


#: A background job: returns a line saying what it did.
IdleJob = Callable[[], Awaitable[str]]


class IdleJobs(Protocol):
    """Work the conversation does when its run has ended (it is idle)."""

    def when_idle(self, name: str, job: IdleJob) -> bool:
        """Run `job` once the current run ends; False when a job of that name already waits."""
        ...


__all__ = [
    "MAX_RESULT_CHARS",
    "Answer",
    "History",
    "IdleJob",
    "IdleJobs",
    "Models",
    "ProfileInfo",
    "ProfileNotFound",
    "SubagentRefused",
    "SubagentResult",
    "SubagentTask",
    "Subagents",
    "bounded",
]
