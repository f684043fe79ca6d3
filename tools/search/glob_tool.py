"""glob: files whose path matches a pattern, newest first (OpenHands' GlobAction shapes)."""

from __future__ import annotations

from events.tools.search import GlobAction, GlobObservation
from tools import files
from tools.base import TextContent, Tool
from tools.search.patterns import compile_glob
from tools.search.walk import list_files, newest_first, search_dir

#: Files shown; the rest are counted.
MAX_FILES = 100


class GlobTool(Tool):
    name = "glob"
    description = (
        "Find files by name pattern in the workspace, most recently modified first.\n"
        '* Patterns: "**/*.js" (any depth), "src/**/*.ts" (under src), "*.{json,yaml}" (a '
        'pattern without a slash matches file names at any depth), "test_?.py".\n'
        "* Hidden files, symlinks and what .gitignore lists are left out.\n"
        f"* At most {MAX_FILES} files are shown, with a count of the rest: narrow the pattern "
        "or give `path` (a directory in the workspace) to see others."
    )
    action_type = GlobAction
    observation_type = GlobObservation
    acts = False
    read_only = True

    async def run(self, action: GlobAction) -> GlobObservation:
        root = self.ctx.working_dir
        try:
            base = search_dir(root, action.path)
        except files.Refusal as e:
            return _error(action, str(e))
        if not action.pattern.strip():
            return _error(action, "The pattern is empty; give a glob such as **/*.py.")
        pattern = action.pattern.strip()
        if pattern.startswith(str(base) + "/"):  # an absolute pattern under the search path
            pattern = pattern[len(str(base)) + 1 :]
        regex = compile_glob(pattern)
        listing = await list_files(base, dict(self.ctx.env))
        found = [p for p in listing.paths if regex.fullmatch(p)]
        ordered = newest_first(base, found)
        shown = [str(base / p) for p in ordered[:MAX_FILES]]
        left_out = len(ordered) - len(shown)
        if not shown:
            text = f"No files match {action.pattern!r} in {base}."
        else:
            text = (
                f"{len(ordered)} file{'s' if len(ordered) != 1 else ''} match "
                f"{action.pattern!r} in {base}, newest first:\n" + "\n".join(shown)
            )
        if left_out:
            text += (
                f"\n[{left_out} more files not shown: narrow the pattern or the path to see them]"
            )
        if not listing.complete:
            text += "\n[the search stopped early (time or size limit): results are incomplete]"
        return GlobObservation(
            files=shown,
            pattern=action.pattern,
            search_path=str(base),
            truncated=left_out > 0 or not listing.complete,
            content=[TextContent(text=files.clip(text, how="Narrow the pattern."))],
        )


def _error(action: GlobAction, text: str) -> GlobObservation:
    return GlobObservation(
        files=[],
        pattern=action.pattern,
        search_path=action.path or "",
        is_error=True,
        content=[TextContent(text=text)],
    )


__all__ = ["MAX_FILES", "GlobAction", "GlobObservation", "GlobTool"]
