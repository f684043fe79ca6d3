"""glob and grep: find files by name and by content, fast, bounded and inside the workspace.

Layout: `patterns` turns globs into regexes, `ignore` answers what .gitignore hides (for the
Python fallback), `walk` lists the files a search sees (ripgrep or Python), and `glob_tool`
and `grep_tool` are the tools.
"""

from __future__ import annotations

from tools.base import single
from tools.search.glob_tool import GlobTool
from tools.search.grep_tool import GrepTool

GLOB_TOOL_SET = single(GlobTool)
GREP_TOOL_SET = single(GrepTool)

__all__ = ["GLOB_TOOL_SET", "GREP_TOOL_SET", "GlobTool", "GrepTool"]
