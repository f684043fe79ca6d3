"""read_file: a text file of the workspace, or a window of its lines (Gemini's read_file)."""

from __future__ import annotations

from events.tools.gemini import ReadFileAction, ReadFileObservation
from tools import files
from tools.base import TextContent, single
from tools.gemini.common import WorkspaceFileTool, error_content

#: Lines returned by one call without `limit` (and the most `limit` may ask for).
MAX_LINES_PER_READ = 1000
#: Characters of one line shown; a longer line is cut with a note.
MAX_LINE_CHARS = 2000


class ReadFileTool(WorkspaceFileTool):
    name = "read_file"
    description = (
        "Reads and returns the content of a text file in the workspace, its lines numbered.\n"
        f"A long file is cut at {MAX_LINES_PER_READ} lines (and {files.MAX_OUTPUT_CHARS:,} "
        "characters) and the response says how to read on with `offset` (0-based line to "
        "start from) and `limit` (number of lines).\n"
        "Paths are relative to the working directory, or absolute inside it. Binary files "
        f"and files over {files.megabytes(files.MAX_FILE_BYTES)} are refused."
    )
    action_type = ReadFileAction
    observation_type = ReadFileObservation
    acts = False
    read_only = True

    async def run(self, action: ReadFileAction) -> ReadFileObservation:
        return await self.guarded(
            lambda: self._read(action),
            lambda why: ReadFileObservation(file_path=action.file_path, **error_content(why)),
        )

    def _read(self, action: ReadFileAction) -> ReadFileObservation:
        path = self.path(action.file_path)
        text = files.read_text(path, root=self.ctx.working_dir, tool="read_file")
        lines = text.splitlines()
        total = len(lines)
        start = action.offset or 0
        if start and start >= total:
            raise files.Refusal(
                f"offset {start} is beyond the end of {path}, which has {total} lines."
            )
        count = min(action.limit or MAX_LINES_PER_READ, MAX_LINES_PER_READ)
        end = min(start + count, total)
        shown: list[str] = []
        chars = 0
        for line in lines[start:end]:
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + " [... line cut]"
            if chars + len(line) > files.MAX_OUTPUT_CHARS and shown:
                break
            shown.append(line)
            chars += len(line) + 1
        end = start + len(shown)
        truncated = start > 0 or end < total
        body = "\n".join(f"{start + i + 1:6}\t{line}" for i, line in enumerate(shown))
        head = f"{path} ({total} lines)"
        if truncated:
            head = f"{path}: lines {start + 1}-{end} of {total}."
            if end < total:
                head += f" To read more, call read_file with offset={end}."
        if not lines:
            body = "(the file is empty)"
        return ReadFileObservation(
            file_path=str(path),
            file_content="".join(f"{line}\n" for line in shown),
            is_truncated=truncated,
            lines_shown=(start + 1, end) if truncated else None,
            total_lines=total,
            content=[TextContent(text=f"{head}\n{body}")],
        )


TOOL_SET = single(ReadFileTool)

__all__ = [
    "MAX_LINES_PER_READ",
    "TOOL_SET",
    "ReadFileAction",
    "ReadFileObservation",
    "ReadFileTool",
]
