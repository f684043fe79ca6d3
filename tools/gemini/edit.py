"""edit: exact find and replace in a workspace file, with a count the model states up front
(Gemini's edit). An empty old_string creates a new file."""

from __future__ import annotations

from pathlib import Path

from events.tools.gemini import EditAction, EditObservation
from tools import files
from tools.base import TextContent, single
from tools.gemini.common import WorkspaceFileTool, error_content

#: Lines shown either side of the first replacement.
SNIPPET_CONTEXT = 4


class EditTool(WorkspaceFileTool):
    name = "edit"
    description = (
        "Replaces text within a file of the workspace.\n"
        "* old_string must match the file exactly, whitespace and indentation included; "
        "include 3-5 lines of context so it is unique. Read the file first.\n"
        "* By default exactly one occurrence is replaced; set expected_replacements to replace "
        "several. The edit fails, changing nothing, if the count found differs.\n"
        "* An empty old_string creates a new file containing new_string (it must not exist).\n"
        "* For large rewrites use write_file. Paths are relative to the working directory, or "
        "absolute inside it."
    )
    action_type = EditAction
    observation_type = EditObservation

    async def run(self, action: EditAction) -> EditObservation:
        return await self.guarded(
            lambda: self._edit(action),
            lambda why: EditObservation(file_path=action.file_path, **error_content(why)),
        )

    def _edit(self, action: EditAction) -> EditObservation:
        root = self.ctx.working_dir
        path = self.path(action.file_path)
        if action.old_string == "":
            return self._create(action, path)
        raw = files.read_text(
            path, root=root, tool="edit", missing_hint=" Use an empty old_string to create it."
        )
        text, crlf = files.to_lf(raw)
        old, new = action.old_string, action.new_string
        if crlf:  # the file's CRLF line ends are hidden while matching
            old, new = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
        if old == new:
            raise files.Refusal("No changes to apply: old_string and new_string are the same.")
        found = text.count(old)
        if found == 0:
            raise files.Refusal(
                f"Failed to edit {path}: old_string was not found. It must match exactly, "
                "whitespace and indentation included; read the file and copy the text from it."
            )
        if found != action.expected_replacements:
            raise files.Refusal(
                f"Failed to edit {path}: expected {action.expected_replacements} "
                f"occurrence{'s' if action.expected_replacements != 1 else ''} of old_string "
                f"but found {found}. Add context to make it unique, or set "
                "expected_replacements to the number you mean to replace."
            )
        edited = text.replace(old, new)
        after = files.from_lf(edited, crlf)
        files.check_size(after, path, "edit")
        files.write_text(path, after, root=root)
        first = text[: text.index(old)].count("\n")
        lines = edited.split("\n")
        low = max(0, first - SNIPPET_CONTEXT)
        high = first + new.count("\n") + SNIPPET_CONTEXT + 1
        snippet = "\n".join(f"{n + 1:6}\t{lines[n]}" for n in range(low, min(high, len(lines))))
        sides = files.snapshots(raw, after)
        return EditObservation(
            file_path=str(path),
            replacements_made=found,
            old_content=sides["old_content"],
            new_content=sides["new_content"],
            content=[
                TextContent(
                    text=files.clip(
                        f"Replaced {found} occurrence{'s' if found != 1 else ''} in {path}. "
                        f"The lines around the first:\n{snippet}",
                        how="Read the file to see more.",
                    )
                )
            ],
        )

    def _create(self, action: EditAction, path: Path) -> EditObservation:
        if path.exists() or path.is_symlink():
            raise files.Refusal(
                f"Failed to edit {path}: old_string is empty, which creates a new file, but "
                "the file already exists. Give the text to replace."
            )
        files.check_size(action.new_string, path, "edit")
        files.make_parents(path, self.ctx.working_dir)
        files.write_text(path, action.new_string, root=self.ctx.working_dir)
        sides = files.snapshots(None, action.new_string)
        return EditObservation(
            file_path=str(path),
            is_new_file=True,
            replacements_made=1,
            old_content=None,
            new_content=sides["new_content"],
            content=[TextContent(text=f"Created {path}.")],
        )


TOOL_SET = single(EditTool)

__all__ = ["TOOL_SET", "EditAction", "EditObservation", "EditTool"]
