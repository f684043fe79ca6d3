"""apply_patch: OpenAI's patch format applied to the workspace, all files or none.

Layout: `parse` reads the patch text into file operations, `hunks` applies a file's hunks to
its text in memory, `commit` stages every file and then writes them (undoing on a failure),
and `tool` is the Tool (its Action and Observation are `events.tools.apply_patch`).
"""

from __future__ import annotations

from tools.apply_patch.parse import PatchError, parse
from tools.apply_patch.tool import TOOL_SET, ApplyPatchTool

__all__ = ["TOOL_SET", "ApplyPatchTool", "PatchError", "parse"]
