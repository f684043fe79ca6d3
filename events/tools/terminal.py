"""terminal: the command the model sends and what it reads back (OpenHands' shapes)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from events.content import Strict
from events.tools.base import Action, Observation


class TerminalAction(Action):
    kind: Literal["TerminalAction"] = "TerminalAction"
    command: str = Field(
        description=(
            "The bash command to run, e.g. `ls -la`. Several lines, `&&`, `;` and heredocs "
            "are fine. While a command is still running: an empty string (with is_input "
            "false) waits for more of its output; with is_input true, the text to type into "
            "it (Enter is added), or C-c, C-d or C-z to send that control key."
        )
    )
    is_input: bool = Field(
        default=False,
        description=(
            "If true, `command` is typed into the command that is still running (an answer "
            "to its prompt, or a control key such as C-c) instead of starting a new command."
        ),
    )
    timeout: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Hard limit in seconds for this call: when it is reached the running command is "
            "stopped (C-c, then killed). Without it (or with 0) the call returns once the "
            "command has printed nothing for a few seconds, and the command keeps running. "
            "Set it for long commands whose output pauses, such as builds and installs."
        ),
    )
    reset: bool = Field(
        default=False,
        description=(
            "If true, kill the shell and everything it started and open a new one in the "
            "initial directory, then run `command` there if it is not empty. Only for a shell "
            "that no longer responds: the working directory, environment variables and "
            "background processes are lost. Not with is_input."
        ),
    )


class CmdOutputMetadata(Strict):
    """What the shell said about itself at its last prompt (OpenHands' shape)."""

    exit_code: int = -1
    #: `$!`: the last process started in the background, -1 when there is none.
    pid: int = -1
    username: str | None = None
    hostname: str | None = None
    working_dir: str | None = None
    py_interpreter_path: str | None = None
    prefix: str = ""
    suffix: str = ""


class TerminalObservation(Observation):
    kind: Literal["TerminalObservation"] = "TerminalObservation"
    command: str | None
    #: -1 while the command is still running; None when no command ran.
    exit_code: int | None = None
    timeout: bool = False
    metadata: CmdOutputMetadata = Field(default_factory=CmdOutputMetadata)
    full_output_save_dir: str | None = None


__all__ = [
    "CmdOutputMetadata",
    "TerminalAction",
    "TerminalObservation",
]
