"""The Gemini-style file tools: list_directory, read_file, write_file and edit.

Each is its own tool set (as `agent.tools` names them), confined to the workspace like the
file routes, and reading and writing through tools.files like file_editor does.
"""

from __future__ import annotations

from tools.gemini import edit, list_directory, read_file, write_file

TOOL_SETS = (list_directory.TOOL_SET, read_file.TOOL_SET, write_file.TOOL_SET, edit.TOOL_SET)

__all__ = ["TOOL_SETS", "edit", "list_directory", "read_file", "write_file"]
