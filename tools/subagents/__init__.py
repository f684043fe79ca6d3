"""task and delegate: sub-agents as child conversations of the one calling them.

Layout: `common` holds the params every spawning tool takes, the sub-agent types and the
limits; `task` runs one sub-agent to its end; `delegate` names several and runs them in
parallel. The conversation side is behind `tools.conversation.Subagents`.
"""

from __future__ import annotations

from tools.base import single
from tools.subagents.common import SubagentParams
from tools.subagents.delegate import DelegateTool
from tools.subagents.task import TaskTool

TASK_TOOL_SET = single(TaskTool, SubagentParams)
DELEGATE_TOOL_SET = single(DelegateTool, SubagentParams)

__all__ = [
    "DELEGATE_TOOL_SET",
    "TASK_TOOL_SET",
    "DelegateTool",
    "SubagentParams",
    "TaskTool",
]
