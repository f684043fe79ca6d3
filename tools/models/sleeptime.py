"""sleeptime_compute: the agent schedules reflection for when it is idle.

No public tool fixes this shape (OpenHands' SleeptimeComputeAction indexes conversations for
an external user model); ours is in events.tools.models and docs/agent-server.md. The call
returns at once. When the current run ends, the conversation's background job asks a model (the
tool's `profile` param, else the conversation's own LLM) to merge what this conversation learned
into the workspace memory file (`memory_path`, `.agents/memory.md` unless set) and writes it
atomically. One reflection waits at a time; a new run cancels a reflection still in flight
and it runs again at the next idle moment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from events.tools.models import SleeptimeComputeAction, SleeptimeComputeObservation
from tools import files
from tools.base import (
    TextContent,
    Tool,
    ToolContext,
    ToolError,
    params_as,
    run_in_thread,
)
from tools.conversation import bounded
from tools.models.common import history_of, models_of

DEFAULT_MEMORY_PATH = ".agents/memory.md"
#: Characters of the memory file kept (what the model writes beyond is cut).
MAX_MEMORY_CHARS = 20_000
JOB_NAME = "sleeptime_compute"
PROMPT = (
    "You maintain the long-term memory file of a coding agent working in one repository. "
    "Merge what the conversation below teaches into the current memory: facts about the "
    "project (layout, commands, conventions), decisions and their reasons, pitfalls met and "
    "how they were solved, open work. Keep what is still true, drop what is not, stay under "
    f"{MAX_MEMORY_CHARS // 5} words. Reply with the whole new file in Markdown and nothing else. "
    "Never write secrets (they appear as <secret-hidden>)."
)


class SleeptimeParams(BaseModel):
    """`params` of sleeptime_compute in `agent.tools`."""

    model_config = ConfigDict(extra="forbid")

    memory_path: str = Field(default=DEFAULT_MEMORY_PATH, max_length=4096)
    """The memory file: relative to the working directory (no `..`), or absolute inside it."""
    profile: str | None = Field(default=None, min_length=1, max_length=100)
    """The saved LLM profile that reflects (default: the conversation's own LLM)."""
    max_history_chars: int = Field(default=60_000, ge=1_000, le=1_000_000)

    @field_validator("memory_path")
    @classmethod
    def _a_file(cls, value: str) -> str:
        if not value.strip() or "\0" in value or value.endswith("/"):
            raise ValueError("memory_path must name a file, e.g. .agents/memory.md")
        if not os.path.isabs(value) and ".." in Path(value).parts:
            raise ValueError("memory_path must stay inside the working directory (no '..')")
        return value


class SleeptimeComputeTool(Tool):
    name = "sleeptime_compute"
    description = (
        "Schedule reflection for when you are idle: after this run ends, what you learned in "
        "this conversation is merged into the workspace memory file (read it at the start of "
        "later work). Returns at once; call it once, near the end of a task worth remembering."
    )
    action_type = SleeptimeComputeAction
    observation_type = SleeptimeComputeObservation

    def __init__(self, ctx: ToolContext, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(ctx, params)
        self.settings = params_as(SleeptimeParams, self.params)
        self.completed = 0

    async def run(self, action: SleeptimeComputeAction) -> SleeptimeComputeObservation:
        if self.ctx.idle is None:
            raise ToolError("Background reflection is not available in this conversation.")
        models_of(self.ctx), history_of(self.ctx)  # both are needed when the job runs
        try:
            target = files.confined(self.ctx.working_dir, self.settings.memory_path)
        except files.Refusal as exc:
            raise ToolError(str(exc)) from None
        shown = files.shown(self.ctx.working_dir, target)
        if not self.ctx.idle.when_idle(JOB_NAME, lambda: self._reflect(target, action.focus)):
            message = f"Reflection into {shown} is already scheduled for when this run ends."
        else:
            message = (
                f"Scheduled: when this run ends, what this conversation learned will be "
                f"merged into {shown}."
            )
        return SleeptimeComputeObservation(
            content=[TextContent(text=message)], message=message, sessions_processed=self.completed
        )

    async def _reflect(self, target: Path, focus: str | None) -> str:
        models, history = models_of(self.ctx), history_of(self.ctx)
        root = self.ctx.working_dir
        old = await run_in_thread(files.read_snapshot, target)
        request = (
            f"<memory>\n{bounded(old or '(empty)', MAX_MEMORY_CHARS)}\n</memory>\n\n"
            f"<conversation>\n{history.transcript(self.settings.max_history_chars)}\n"
            "</conversation>"
        )
        if focus:
            request += f"\n\nFocus on: {focus}"
        answer = await models.ask(
            self.settings.profile,
            [{"role": "system", "content": PROMPT}, {"role": "user", "content": request}],
        )
        text = answer.text.strip()[:MAX_MEMORY_CHARS]
        if not text:
            raise RuntimeError("the model returned an empty memory file")

        def write() -> None:
            files.make_parents(target, root)
            files.write_text(target, text + "\n", root=root)

        try:
            await run_in_thread(write)
        except files.Refusal as exc:
            raise RuntimeError(str(exc)) from None
        self.completed += 1
        return f"wrote {files.shown(root, target)} ({len(text)} characters, {answer.model})"
