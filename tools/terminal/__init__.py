"""terminal: one persistent bash per conversation, driven through a pseudo-terminal.

Why a pty: programs behave as they do for a person (line-buffered output, prompts, C-c), and
bash gets job control, so each foreground command has its own process group that a timeout
can kill while the shell lives on. The event loop reads the pty itself (no tmux server, no
thread per shell): a round trip takes well under a millisecond and an idle shell costs what
bash does, a few megabytes.

How a command runs: its text goes to a private file and the shell is typed a fixed trigger line
that reads the file and `eval`s it. So heredocs, many-line commands and lines longer than the
terminal's 4 KiB line limit work, and the command is never echoed. The end of a command is the
next prompt: PROMPT_COMMAND prints a marker (a control byte, a random nonce, then $?, $!, $PWD
and $PATH). The function holds the byte as an octal escape that only printf turns into the
byte, so printing the function or the environment cannot fake a marker.

Layout: `output` turns the terminal's bytes into text and caps and saves it, `shell` is the
bash on a pty (what it started is found and killed by core.processes), and `tool` is the Tool
that drives a shell for one conversation. What the model sends and reads is the schema's
(`events.tools.terminal`).
"""

from __future__ import annotations

from tools.terminal.shell import Prompt, Shell, Stop
from tools.terminal.tool import TOOL_SET, TerminalParams, TerminalTool

__all__ = [
    "TOOL_SET",
    "Prompt",
    "Shell",
    "Stop",
    "TerminalParams",
    "TerminalTool",
]
