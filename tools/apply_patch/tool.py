"""The apply_patch Tool: a patch parsed, staged and written, all files or none (its Action and
Observation, shaped like OpenHands', are `events.tools.apply_patch`)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from events.tools.apply_patch import ApplyPatchAction, ApplyPatchObservation, Commit, FileChange
from tools import files
from tools.apply_patch.commit import Change, WriteFailed, stage, write_all
from tools.apply_patch.parse import PatchError, parse
from tools.base import (
    TextContent,
    Tool,
    ToolContext,
    run_in_thread,
    single,
)

#: A patch longer than this is refused before parsing (the model should split it).
MAX_PATCH_CHARS = 1_000_000
#: Contents of all files together carried in one observation's `commit`; beyond, None.
MAX_COMMIT_SNAPSHOT_BYTES = 256 * 1024


class ApplyPatchTool(Tool):
    name = "apply_patch"
    description = (
        "Apply a patch to files in the workspace: add, update, move and delete files in one "
        "call, all or nothing (if any part does not apply, no file is changed).\n"
        "The patch starts with '*** Begin Patch' and ends with '*** End Patch'. In between, "
        "one section per file:\n"
        "*** Add File: path/new.py      then each line of the new file prefixed with '+'\n"
        "*** Delete File: path/old.py\n"
        "*** Update File: path/app.py   then, optionally, '*** Move to: path/renamed.py', then "
        "hunks. A hunk starts with '@@' (optionally followed by a line to find first, such as "
        "a class or def line); its lines start with ' ' (unchanged context), '-' (remove) or "
        "'+' (add). Give about 3 lines of context above and below each change, copied exactly "
        "from the file. '*** End of File' after a hunk anchors it at the end of the file.\n"
        "Paths are relative to the workspace (absolute paths must be inside it)."
    )
    action_type = ApplyPatchAction
    observation_type = ApplyPatchObservation

    def __init__(self, ctx: ToolContext, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(ctx, params)
        # Held in the worker thread: a cancelled call's thread finishes its writes (or its
        # undo) before the next patch reads those files.
        self._lock = threading.Lock()

    async def run(self, action: ApplyPatchAction) -> ApplyPatchObservation:
        try:
            result: ApplyPatchObservation = await run_in_thread(self._apply, action.patch)
            return result
        except PatchError as e:
            head = (
                "The patch was not applied"
                if isinstance(e, WriteFailed)
                else ("The patch was not applied; no file was changed")
            )
            text = files.clip(f"{head}.\n{e}", how="Fix the patch and try again.")
            return ApplyPatchObservation(
                message=text, is_error=True, content=[TextContent(text=text)]
            )

    def _apply(self, patch: str) -> ApplyPatchObservation:
        if len(patch) > MAX_PATCH_CHARS:
            raise PatchError(
                f"The patch has {len(patch):,} characters; the limit is "
                f"{MAX_PATCH_CHARS:,}. Split it into several calls."
            )
        ops = parse(patch)
        with self._lock:
            staged = stage(self.ctx.working_dir, ops)
            write_all(self.ctx.working_dir, staged.writes)
        message = files.clip(_summary(staged.changes, staged.fuzz), how="")
        return ApplyPatchObservation(
            message=message,
            fuzz=staged.fuzz,
            commit=_commit(staged.changes),
            content=[TextContent(text=message)],
        )


def _summary(changes: list[Change], fuzz: int) -> str:
    letters = {"add": "A", "delete": "D", "update": "M"}
    lines = ["Done! The patch was applied:"]
    for change in changes:
        target = f" -> {change.move_path}" if change.move_path else ""
        lines.append(f"{letters[change.type]} {change.path}{target}")
    if fuzz:
        lines.append(
            f"(some context matched only loosely, ignoring whitespace: fuzz {fuzz}; "
            "check the result)"
        )
    return "\n".join(lines)


def _commit(changes: list[Change]) -> Commit:
    """The changes for the event, contents dropped once they would make it too big."""
    budget = MAX_COMMIT_SNAPSHOT_BYTES
    out: dict[str, FileChange] = {}
    for change in changes:
        sides = files.snapshots(change.before, change.after)
        size = sum(len(s.encode()) for s in sides.values() if s is not None)
        if size > budget:
            sides = {"old_content": None, "new_content": None}
        budget -= size if sides["old_content"] or sides["new_content"] else 0
        out[change.path] = FileChange(type=change.type, move_path=change.move_path, **sides)
    return Commit(changes=out)


TOOL_SET = single(ApplyPatchTool)

__all__ = [
    "TOOL_SET",
    "ApplyPatchAction",
    "ApplyPatchObservation",
    "ApplyPatchTool",
    "Commit",
    "FileChange",
]
