"""The tool interface: an Action in, an Observation out, a context beside them.

Tools know nothing of HTTP or the event log. A tool *set* (what `agent.tools` names, e.g.
`terminal` or `browser_tool_set`) makes one or more tools for one conversation; each tool
owns its state (a shell, a browser context) until `close()`.
"""

from __future__ import annotations

import asyncio
import copy
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, cast

from pydantic import BaseModel, ValidationError

from events.content import (
    ImageContent,
    TextContent,
    ToolAnnotations,
    ToolDefinition,
)
from events.tools import AnyAction, AnyObservation
from events.tools.base import Action, Observation

if TYPE_CHECKING:
    from tools.browser.manager import BrowserManager
    from tools.conversation import History, IdleJobs, Models, Subagents

#: Where the call running in this task may send its output as it comes (the loop sets it
#: around one tool call; the terminal streams its lines there). Unset: nobody listens.
LIVE_OUTPUT: ContextVar[Callable[[str], None] | None] = ContextVar("live_output", default=None)

#: Arguments the loop takes off every tool call before validating the Action (SPEC 6.2
#: ActionEvent.security_risk and .summary); they are offered to the model by tools that act.
META_ARGUMENTS = ("security_risk", "summary")


class ToolError(Exception):
    """The one way a tool fails: the call could not be carried out (becomes an
    AgentErrorEvent the model reads); the run goes on.

    An Observation with `is_error=True` is not a second failure channel but a result in the
    tool's own shape that says the request was refused (file_editor's "no such file", as
    OpenHands clients expect to read it). The loop treats both alike as a failed call
    (agent_server.agent.loop._failed), which is what stuck detection counts.
    """


class NetworkNotes(Protocol):
    """What the sandbox's network boundary refused, as a line for the model. A refused
    connection fails at once and reads like a service that is down; told that a policy
    refused it, and what that policy allows, the model stops retrying and changes course."""

    async def refused(self, within: float) -> str | None:
        """One bracketed line on the connections refused in the last `within` seconds; None
        when none was, or when nothing can be known (it never raises, and answers within a
        few seconds whatever the network does)."""
        ...


@dataclass
class ToolContext:
    """What a tool may know of its conversation."""

    conversation_id: str
    working_dir: Path
    #: A private directory of this conversation for the tool's own files (saved outputs, lists).
    state_dir: Path
    #: Secret values by name: put in a shell's environment, never echoed back.
    secrets: Mapping[str, str] = field(default_factory=dict)
    #: Extra environment for processes the tool starts (git author, ...).
    env: Mapping[str, str] = field(default_factory=dict)
    #: Whether the model reads images (screenshots travel as ImageContent when it does).
    vision: bool = False
    #: Seconds of idleness after which tools holding processes release them.
    idle_timeout: float = 600.0
    #: The server's one Chromium, shared by conversations (made on first call of this).
    browser: Callable[[], BrowserManager] | None = None
    #: Child conversations of this one (task, delegate, workflow); None: not offered here.
    subagents: Subagents | None = None
    #: The conversation's LLM and saved profiles (switch_llm, vision_inspect, consult_advisor).
    models: Models | None = None
    #: A read-only, masked view of the conversation so far.
    history: History | None = None
    #: Work for when the run has ended (sleeptime_compute).
    idle: IdleJobs | None = None
    #: What the sandbox's network policy refused (the terminal notes it under a failed
    #: command); None: no network boundary to speak of.
    network: NetworkNotes | None = None


class Tool(ABC):
    """One function the model can call."""

    name: ClassVar[str]
    description: ClassVar[str]
    action_type: ClassVar[type[Action]]
    observation_type: ClassVar[type[Observation]]
    #: Whether the tool changes the world (offered a `security_risk` argument, SPEC 2.7).
    acts: ClassVar[bool] = True
    read_only: ClassVar[bool] = False

    def __init__(self, ctx: ToolContext, params: Mapping[str, Any] | None = None) -> None:
        self.ctx = ctx
        self.params = dict(params or {})

    @abstractmethod
    async def run(self, action: Any) -> AnyObservation:
        """Carry out the action. Raise ToolError for failures the model should see.

        Runs as an asyncio task that may be cancelled (interrupt): blocking work belongs in a
        thread or a subprocess, and a cancelled call must leave no process running.
        """

    async def close(self) -> None:  # noqa: B027 (optional: most tools hold nothing)
        """Release whatever the tool holds (processes, browser contexts)."""

    # -- what the model sees -------------------------------------------------------------

    @classmethod
    def parameters(cls) -> dict[str, Any]:
        """JSON schema of the arguments: the Action's fields without `kind`, plus the meta ones."""
        schema = copy.deepcopy(action_schema(cls.action_type))
        props = dict(schema.get("properties", {}))
        props.pop("kind", None)
        required = [r for r in schema.get("required", []) if r != "kind"]
        if cls.acts:
            props["security_risk"] = {
                "type": "string",
                "enum": ["LOW", "MEDIUM", "HIGH"],
                "description": "Your assessment of the risk of this action.",
            }
            props["summary"] = {
                "type": "string",
                "description": "About ten words saying what this action does.",
            }
        out: dict[str, Any] = {"type": "object", "properties": props, "required": required}
        if "$defs" in schema:
            out["$defs"] = schema["$defs"]
        return out

    @classmethod
    def definition(cls) -> ToolDefinition:
        return ToolDefinition(
            kind=cls.__name__,
            title=cls.name,
            description=cls.description,
            action_type=cls.action_type.__name__,
            observation_type=cls.observation_type.__name__,
            parameters=cls.parameters(),
            annotations=ToolAnnotations(
                title=cls.name,
                readOnlyHint=cls.read_only,
                destructiveHint=cls.acts and not cls.read_only,
            ),
        )

    @classmethod
    def parse(cls, arguments: Mapping[str, Any]) -> AnyAction:
        """Arguments of a tool call -> the Action; raises pydantic's ValidationError."""
        args = {k: v for k, v in arguments.items() if k not in META_ARGUMENTS}
        args["kind"] = cls.action_type.__name__
        # Every tool's kind is one of the schema's (tests/events/test_events.py holds the lists
        # equal).
        return cast(AnyAction, cls.action_type.model_validate(args))


@dataclass(frozen=True)
class ToolSet:
    """What one name in `agent.tools` stands for."""

    name: str
    make: Callable[[ToolContext, Mapping[str, Any]], list[Tool]]
    action_types: tuple[type[Action], ...]
    observation_types: tuple[type[Observation], ...]
    #: The model of the set's `params`, checked at creation (a callable, so that what it
    #: lives beside, e.g. Playwright, is not imported until a conversation needs it).
    params_model: Callable[[], type[BaseModel]] | None = None


M = TypeVar("M", bound=BaseModel)


@functools.cache
def action_schema(action_type: type[Action]) -> dict[str, Any]:
    """An Action's JSON schema, built once per kind: pydantic builds it anew each time (10-15
    ms a tool, paid by each new conversation's first request); the sandbox template builds
    them all before it forks. Shared: copied before it is changed."""
    return action_type.model_json_schema()


def params_as(model: type[M], raw: Mapping[str, Any]) -> M:
    """A tool set's `params` as its model. Keys with a leading `_` are the caller's own notes,
    never settings: left out here, so the check at creation and the tool agree (a model that
    forbids extra keys would otherwise pass the one and fail the other)."""
    return model.model_validate({k: v for k, v in raw.items() if not k.startswith("_")})


def single(tool: type[Tool], params: type[BaseModel] | None = None) -> ToolSet:
    """A tool set made of one tool (whose `params` follow the model `params`, if given)."""
    return ToolSet(
        name=tool.name,
        make=lambda ctx, raw: [tool(ctx, raw)],
        action_types=(tool.action_type,),
        observation_types=(tool.observation_type,),
        params_model=None if params is None else (lambda: params),
    )


async def run_in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run blocking file work off the event loop."""
    return await asyncio.to_thread(fn, *args)


__all__ = [
    "META_ARGUMENTS",
    "Action",
    "NetworkNotes",
    "Observation",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolSet",
    "ImageContent",
    "TextContent",
    "ValidationError",
    "params_as",
    "run_in_thread",
    "single",
]
