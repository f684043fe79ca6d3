"""write_file: a whole file written at once, created or replaced (Gemini's write_file)."""

from __future__ import annotations

from events.tools.gemini import WriteFileAction, WriteFileObservation
from tools import files
from tools.base import TextContent, single
from tools.gemini.common import WorkspaceFileTool, error_content


class WriteFileTool(WorkspaceFileTool):
    name = "write_file"
    description = (
        "Writes content to a file in the workspace, replacing all of it; a missing file is "
        "created (with its parent directories). For small changes to an existing file use "
        "`edit` instead. The write is atomic: the file holds the old or the new content, "
        "never a mix. Paths are relative to the working directory, or absolute inside it."
    )
    action_type = WriteFileAction
    observation_type = WriteFileObservation

    async def run(self, action: WriteFileAction) -> WriteFileObservation:
        return await self.guarded(
            lambda: self._write(action),
            lambda why: WriteFileObservation(file_path=action.file_path, **error_content(why)),
        )

    def _write(self, action: WriteFileAction) -> WriteFileObservation:
        root = self.ctx.working_dir
        path = self.path(action.file_path)
        if path.is_dir():
            raise files.Refusal(f"{path} is a directory; give a file path.")
        files.check_size(action.content, path, "write_file")
        is_new = not path.exists()
        before = None if is_new else files.read_snapshot(path)
        files.make_parents(path, root)
        files.write_text(path, action.content, root=root)
        verb = "Created" if is_new else "Overwrote"
        count = action.content.count("\n") + (
            not action.content.endswith("\n") and bool(action.content)
        )
        sides = files.snapshots(before, action.content)
        if before is None and not is_new:  # too big to carry: no half a diff either
            sides = {"old_content": None, "new_content": None}
        return WriteFileObservation(
            file_path=str(path),
            is_new_file=is_new,
            old_content=sides["old_content"],
            new_content=sides["new_content"],
            content=[TextContent(text=f"{verb} {path} ({count} lines).")],
        )


TOOL_SET = single(WriteFileTool)

__all__ = ["TOOL_SET", "WriteFileAction", "WriteFileObservation", "WriteFileTool"]
