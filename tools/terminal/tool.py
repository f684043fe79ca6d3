"""The terminal Tool: one persistent shell per conversation, driven one call at a time."""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import shutil
import socket
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ConfigDict, Field

from core.masking import Masker
from core.processes import child_env
from events.content import Strict
from events.tools.terminal import CmdOutputMetadata, TerminalAction, TerminalObservation
from tools.base import LIVE_OUTPUT, TextContent, Tool, ToolContext, ToolError, single
from tools.terminal.output import Capture
from tools.terminal.shell import Shell, Stop


class TerminalParams(Strict):
    """What a conversation may tune (`params` of the tool set); the defaults suit a model."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    no_output_timeout: float = Field(default=10.0, gt=0)
    """Seconds without new output after which a call returns; the command keeps running."""

    max_call_seconds: float = Field(default=300.0, gt=0)
    """Seconds after which a call without `timeout` returns even while the command keeps
    printing (a server in the foreground, `ping`); the command keeps running."""

    max_output_chars: int = Field(default=30_000, ge=200)
    """Longer output is cut in the middle (head and tail kept) and saved whole to a file."""

    kill_grace: float = Field(default=2.0, gt=0)
    """Seconds a command gets to exit after C-c before its process group is killed."""

    start_timeout: float = Field(default=10.0, gt=0)
    """Seconds bash may take to show its first prompt."""


# -- tuning that is no one's business but this module's -----------------------------------

#: A dumb terminal: programs then skip redraws and colours, and pagers cannot hold a call.
TERMINAL_ENV = {"TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat", "MANPAGER": "cat"}


def username() -> str:
    """Who the shell runs as (the server's user, as bash's prompt says it), asked when a
    command ends, never at import: a server forked from the template imported this module as
    root, then dropped to the sandbox's uid."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid without a passwd entry
        return str(os.getuid())


Outcome = Literal["done", "silent", "long", "timeout"]


class TerminalTool(Tool):
    name = "terminal"
    description = (
        "Run a bash command in a persistent shell.\n"
        "* One shell per conversation: the working directory, environment variables, "
        "functions and activated virtualenvs carry over between calls.\n"
        "* Chain commands with `&&` or `;`; several lines and heredocs are fine.\n"
        "* Start servers and other long-lived programs in the background with their output "
        "in a file, e.g. `python3 app.py > server.log 2>&1 &`.\n"
        "* A command that prints nothing for a while returns what it printed so far with "
        "exit code -1 and keeps running: send an empty command to wait, text with "
        "is_input=true to answer it, or C-c with is_input=true to stop it. Set `timeout` "
        "for commands expected to be quiet for long.\n"
        "* Output longer than about 30,000 characters is cut in the middle; the whole of it "
        "is saved to a file whose path is given.\n"
        "* Avoid full-screen programs (vim, less, top); use non-interactive flags "
        "(`apt-get -y`, `git --no-pager`)."
    )
    action_type = TerminalAction
    observation_type = TerminalObservation

    def __init__(self, ctx: ToolContext, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(ctx, params)
        self.settings = TerminalParams.model_validate(self.params)
        self._save_dir = ctx.state_dir / "terminal"
        self._shell: Shell | None = None
        self._lock = asyncio.Lock()  # one call at a time drives the shell
        self._notice = ""  # for the next observation: the shell was replaced, and why
        self._saved = False  # some output of this call was saved to a file
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_close: asyncio.Task[None] | None = None
        self._last_used = 0.0
        self._submitted = 0.0  # when the command now (or last) running was sent (loop time)

    async def run(self, action: TerminalAction) -> TerminalObservation:
        async with self._lock:
            self._cancel_idle_timer()
            self._saved = False
            try:
                return await self._run(action)
            finally:
                self._arm_idle_timer()

    async def close(self) -> None:
        self._cancel_idle_timer()
        if self._idle_close is not None:
            self._idle_close.cancel()
        # Not under the lock: a call still waiting on its command wakes when the shell ends.
        await self._close_shell()

    # -- one call -----------------------------------------------------------------------------

    async def _run(self, action: TerminalAction) -> TerminalObservation:
        command = action.command
        if action.reset:
            if action.is_input:
                raise ToolError("reset cannot be combined with is_input.")
            await self._close_shell()
            self._notice = f"[The shell was reset: this is a new shell in {self.ctx.working_dir}.]"
        shell = await self._ensure_shell()
        notice, self._notice = self._notice, ""
        if action.is_input:
            if not shell.running:
                return self._error(
                    command,
                    notice,
                    "[Nothing was sent: no command is running. "
                    "To run this text as a command, send it with is_input=false.]",
                )
            await shell.send(_keys(command))
            return await self._follow(shell, command, action.timeout, notice)
        if shell.running:
            if not command.strip():
                return await self._follow(shell, command, action.timeout, notice)
            return self._error(
                command,
                notice,
                "[Not run: the previous command is still "
                f"running. {HOW_TO_CONTINUE} Then send this command again.]",
            )
        # What background jobs printed since the last call comes first, marked as theirs.
        earlier = await self._text(shell.take())
        if earlier.strip():
            notice = _join(notice, "[Output of background processes since the last call:]",
                           earlier.rstrip("\n"), "[End of background output.]")  # fmt: skip
        if not command.strip():
            if action.reset:
                return self._observe(shell, None, "", None, prefix=notice)
            return self._error(command, notice, "[No command is running; send one to run.]")
        self._submitted = asyncio.get_running_loop().time()
        await shell.submit(command)
        return await self._follow(shell, command, action.timeout, notice)

    async def _ensure_shell(self) -> Shell:
        if self._shell is not None and self._shell.exited:  # it ended between calls
            code = await self._close_shell()
            self._notice = _join(self._notice, f"[The shell had exited (code {code}); this "
                                 f"is a new shell in {self.ctx.working_dir}.]")  # fmt: skip
        if self._shell is None:
            # The server's own credentials are not the model's to use (child_env withholds
            # them); not quiet, so that a prompt (a password, a y/n) can be answered.
            env = child_env(TERMINAL_ENV, self.ctx.env, self.ctx.secrets, quiet=False)
            shell = Shell(self.ctx.working_dir, env, Masker(self.ctx.secrets), self._save_dir,
                          self.settings.max_output_chars)  # fmt: skip
            await shell.start(self.settings.start_timeout)  # closes itself if it fails
            self._shell = shell
        return self._shell

    async def _follow(
        self, shell: Shell, command: str, timeout: float | None, prefix: str
    ) -> TerminalObservation:
        """Wait for the command to end, fall silent or run out of time, and say which (its
        output streamed meanwhile to LIVE_OUTPUT's listener, if any)."""
        shell.on_output = LIVE_OUTPUT.get()
        try:
            outcome = await self._wait(shell, timeout or None)
            stop = await shell.stop(self.settings.kill_grace) if outcome == "timeout" else None
        except asyncio.CancelledError:
            await self._abandon(shell)
            raise
        finally:
            shell.on_output = None
        suffix, exit_code = "", -1
        if stop is not None:
            suffix = f"[The command reached its {timeout:g} s timeout; stopped {stop.value}.]"
            if stop is Stop.FAILED:
                await self._close_shell()
                self._notice = f"[This is a new shell in {self.ctx.working_dir}.]"
        output = await self._text(shell.take())
        if shell.exited:
            code = await self._close_shell()  # None: it was closed here, not by itself
            if code is not None:
                suffix = _join(suffix, f"[The shell exited (code {code}); the next command "
                               "starts a new shell.]")  # fmt: skip
                exit_code = code
        elif shell.running:
            said = (f"has printed nothing for {self.settings.no_output_timeout:g} seconds"
                    if outcome == "silent" else f"has run for {self.settings.max_call_seconds:g} "
                    "seconds in this call")  # fmt: skip
            suffix = f"[The command {said} and is still running. {HOW_TO_CONTINUE}]"
        elif shell.prompt is not None:
            exit_code = shell.prompt.exit_code
        if outcome == "timeout" or exit_code not in (0, -1):  # it failed: was it the network?
            suffix = _join(suffix, await self._refused())
        return self._observe(shell, command, output, exit_code, timeout=outcome == "timeout",
                             prefix=prefix, suffix=suffix)  # fmt: skip

    async def _refused(self) -> str:
        """What the sandbox's network policy refused while the command ran ("" when nothing,
        or no one knows): a refused connection fails at once, reading like a service that is
        down, unless the model is told."""
        if self.ctx.network is None:
            return ""
        ran = asyncio.get_running_loop().time() - self._submitted
        return await self.ctx.network.refused(ran) or ""

    async def _wait(self, shell: Shell, timeout: float | None) -> Outcome:
        """Until the command ends, prints nothing for no_output_timeout seconds, has run
        max_call_seconds, or reaches its hard timeout (which replaces the other two: whoever
        sets one expects quiet stretches).
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        while True:
            deadlines: dict[Outcome, float] = (
                {"timeout": start + timeout}
                if timeout is not None
                else {
                    "silent": max(shell.last_output, start) + self.settings.no_output_timeout,
                    "long": start + self.settings.max_call_seconds,
                }
            )
            outcome, deadline = min(deadlines.items(), key=lambda item: item[1])
            left = deadline - loop.time()
            if left <= 0:
                return outcome
            if await shell.wait(left) or shell.exited:
                return "done"

    async def _abandon(self, shell: Shell) -> None:
        """The call was cancelled: stop its command and drop its output; the shell stays."""
        try:
            stop = await shell.stop(self.settings.kill_grace)
        except asyncio.CancelledError:  # cancelled again: no more waiting, just kill
            shell.kill_foreground()
            raise
        if stop is Stop.FAILED:
            await self._close_shell()
            self._notice = "[The shell did not respond to C-c and was replaced by a new one.]"
        else:
            await shell.take().finish()

    async def _text(self, capture: Capture) -> str:
        text = await capture.finish()
        self._saved = self._saved or capture.path is not None
        return text

    async def _close_shell(self) -> int | None:
        shell, self._shell = self._shell, None
        return await shell.close() if shell is not None else None

    # -- idleness -------------------------------------------------------------------------

    def _arm_idle_timer(self) -> None:
        loop = asyncio.get_running_loop()
        self._last_used = loop.time()
        if self._shell is not None:
            self._idle_timer = loop.call_later(self.ctx.idle_timeout, self._on_idle)

    def _cancel_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _on_idle(self) -> None:
        self._idle_close = asyncio.get_running_loop().create_task(self._close_if_idle())

    async def _close_if_idle(self) -> None:
        async with self._lock:
            idle = asyncio.get_running_loop().time() - self._last_used
            if self._shell is None or idle < self.ctx.idle_timeout:  # used meanwhile
                return
            await self._close_shell()
            self._notice = (
                f"[The previous shell was closed after {self.ctx.idle_timeout:g} seconds "
                f"without use; this is a new shell in {self.ctx.working_dir}: the working "
                "directory, environment variables and background processes of the old one "
                "are gone.]"
            )

    # -- observations -----------------------------------------------------------------------

    def _observe(
        self, shell: Shell, command: str | None, output: str, exit_code: int | None,
        *, timeout: bool = False, prefix: str = "", suffix: str = "",
    ) -> TerminalObservation:  # fmt: skip
        prompt = shell.prompt
        trailer = [f"[Current working directory: {prompt.working_dir}]"] if prompt else []
        if exit_code is not None and exit_code != -1:
            trailer.append(f"[Command finished with exit code {exit_code}]")
        return TerminalObservation(
            content=[TextContent(text=_join(prefix, output.rstrip("\n"), suffix, *trailer))],
            command=command,
            exit_code=exit_code,
            timeout=timeout,
            metadata=CmdOutputMetadata(
                exit_code=-1 if exit_code is None else exit_code,
                pid=prompt.background_pid if prompt else -1,
                username=username(),
                hostname=socket.gethostname(),
                working_dir=prompt.working_dir if prompt else None,
                py_interpreter_path=_python(prompt.path) if prompt else None,
                prefix=prefix,
                suffix=suffix,
            ),
            full_output_save_dir=str(self._save_dir) if self._saved else None,
        )

    def _error(self, command: str, prefix: str, text: str) -> TerminalObservation:
        return TerminalObservation(
            content=[TextContent(text=_join(prefix, text))],
            is_error=True,
            command=command,
            metadata=CmdOutputMetadata(prefix=prefix),
            full_output_save_dir=str(self._save_dir) if self._saved else None,
        )


HOW_TO_CONTINUE = (
    "Send an empty command to wait for more output, text with is_input=true to answer it, "
    "or C-c with is_input=true to stop it."
)


def _keys(text: str) -> bytes:
    """What typing `text` sends: a control key for C-c and the like, else the text and Enter."""
    if re.fullmatch(r"C-[a-zA-Z]", text):
        return bytes([ord(text[2].upper()) - 64])
    return (text + "\n").encode()


def _join(*parts: str) -> str:
    return "\n".join(p for p in parts if p)


def _python(path: str) -> str | None:
    """The interpreter `python` names in the shell (a few stat calls)."""
    return shutil.which("python", path=path) or shutil.which("python3", path=path)


TOOL_SET = single(TerminalTool)
