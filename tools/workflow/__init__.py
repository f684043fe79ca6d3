"""workflow: a named multi-step workflow of the workspace (`definition` holds the format)."""

from __future__ import annotations

from tools.base import single
from tools.subagents.common import SubagentParams
from tools.workflow.tool import WorkflowTool

TOOL_SET = single(WorkflowTool, SubagentParams)

__all__ = ["TOOL_SET", "WorkflowTool"]
