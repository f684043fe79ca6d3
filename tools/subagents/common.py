"""What task, delegate and workflow share: their params, the sub-agent types, the limits.

A sub-agent is a child conversation of the one calling the tool (`tools.conversation.
Subagents`). Its tools are a subset of the parent's, chosen by its type; its depth (parent's
+ 1) and the number of children a conversation makes are bounded by the tool set's params,
which every child inherits with the tools themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from tools.base import ToolContext, ToolError, params_as
from tools.conversation import SubagentRefused, SubagentResult, Subagents, SubagentTask

#: Tools that start sub-agents: a child at the depth limit is not given them.
SPAWNING = frozenset({"task", "delegate", "workflow"})
#: Hard upper bounds of the params, whatever a request asks for.
MAX_DEPTH, MAX_CHILDREN, MAX_CHILD_ITERATIONS = 5, 100, 1000


class SubagentParams(BaseModel):
    """The `params` of task, delegate and workflow in `agent.tools` (checked at creation)."""

    model_config = ConfigDict(extra="forbid")

    max_depth: int = Field(default=2, ge=1, le=MAX_DEPTH)
    """How deep sub-agents may nest: 1 lets the top conversation start children that start
    none; 2 lets those children start their own; and so on."""
    max_subagents: int = Field(default=10, ge=1, le=MAX_CHILDREN)
    """Children one conversation may start over its whole life (resuming one is free)."""
    max_iterations: int = Field(default=100, ge=1, le=MAX_CHILD_ITERATIONS)
    """max_iterations of each child conversation."""


@dataclass(frozen=True)
class AgentType:
    description: str
    #: The tool set names this type may have (None: every tool the parent has).
    tools: frozenset[str] | None
    #: Said to the child before its task.
    brief: str


AGENT_TYPES: dict[str, AgentType] = {
    "general-purpose": AgentType(
        "any multi-step task, with every tool you have",
        None,
        "You are a sub-agent working for another agent. Do the task below, then call finish "
        "with a complete report of what you did and found: it is all the other agent sees.",
    ),
    "code-explorer": AgentType(
        "reads and searches the workspace (read_file, glob, grep, list_directory); changes nothing",
        frozenset({"read_file", "glob", "grep", "list_directory"}),
        "You are a read-only code explorer working for another agent. Answer the question "
        "below from the workspace; call finish with file paths, line numbers and the "
        "snippets that matter.",
    ),
    "bash-runner": AgentType(
        "runs commands in the terminal and reports their outcome",
        frozenset({"terminal"}),
        "You run commands for another agent. Run what the task below asks and call finish "
        "with a short summary of the outcome (failures with their causes, no long logs).",
    ),
}
ALIASES = {"default": "general-purpose", "general": "general-purpose"}


def agent_type(name: str) -> tuple[str, AgentType]:
    """The type named (spaces, underscores and case do not matter); ToolError when unknown."""
    key = "-".join(name.strip().lower().replace("_", " ").split()) or "general-purpose"
    key = ALIASES.get(key, key)
    found = AGENT_TYPES.get(key)
    if found is None:
        raise ToolError(
            f"Unknown subagent_type {name!r}; the types are: " + ", ".join(AGENT_TYPES) + "."
        )
    return key, found


def types_text() -> str:
    return "\n".join(f"- {name}: {t.description}" for name, t in AGENT_TYPES.items())


def seam(ctx: ToolContext) -> Subagents:
    if ctx.subagents is None:
        raise ToolError("Sub-agents are not available in this conversation.")
    return ctx.subagents


def child_tools(subagents: Subagents, kind: AgentType, params: SubagentParams) -> tuple[str, ...]:
    """The parent's tools this type may have; none that spawn at the depth limit."""
    names = [n for n in subagents.tool_names() if kind.tools is None or n in kind.tools]
    if subagents.depth() + 1 >= params.max_depth:
        names = [n for n in names if n not in SPAWNING]
    if kind.tools is not None and not names:
        raise ToolError(
            "This conversation has none of the tools that sub-agent type needs ("
            + ", ".join(sorted(kind.tools))
            + ")."
        )
    return tuple(names)


def check_limits(subagents: Subagents, params: SubagentParams, new: int) -> None:
    """ToolError when `new` more children would pass the depth or the count limit."""
    depth = subagents.depth()
    if depth + 1 > params.max_depth:
        raise ToolError(
            f"Sub-agents may nest {params.max_depth} deep and this conversation "
            f"is already at depth {depth}: do the work yourself."
        )
    made = subagents.spawned()
    if made + new > params.max_subagents:
        raise ToolError(
            f"This conversation may start {params.max_subagents} sub-agents and "
            f"has started {made}; {new} more would pass the limit."
        )


async def run_child(subagents: Subagents, task: SubagentTask) -> SubagentResult:
    try:
        return await subagents.run(task)
    except SubagentRefused as refused:
        raise ToolError(str(refused)) from None


def params_of(raw: dict[str, object]) -> SubagentParams:
    """The tool's params (already checked at creation; the leading `_` keys are internal)."""
    return params_as(SubagentParams, raw)
