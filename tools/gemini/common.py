"""What the Gemini-style file tools share: workspace paths and mistakes told to the model.

Every path is resolved inside the workspace by tools.files (the file routes' rule), relative
paths against the working directory; a refused call is an error observation, never a crash.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from tools import files
from tools.base import Observation, TextContent, Tool, ToolContext, run_in_thread

ObsT = TypeVar("ObsT", bound=Observation)


class WorkspaceFileTool(Tool):
    """A tool whose calls do blocking file work on paths inside the workspace."""

    def __init__(self, ctx: ToolContext, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(ctx, params)
        # Held in the worker thread: a cancelled call's write finishes before the next read.
        self._lock = threading.Lock()

    def path(self, raw: str) -> Path:
        return files.confined(self.ctx.working_dir, raw)

    async def guarded(self, work: Callable[[], ObsT], failed: Callable[[str], ObsT]) -> ObsT:
        """work() in a thread under the lock; a Refusal or OSError becomes failed(reason)."""

        def locked() -> ObsT:
            with self._lock:
                return work()

        try:
            result: ObsT = await run_in_thread(locked)
            return result
        except files.Refusal as e:
            return failed(str(e))
        except OSError as e:
            where = f" ({e.filename})" if e.filename else ""
            return failed(f"{self.name} failed: {e.strerror or e}{where}")


def error_content(text: str) -> dict[str, Any]:
    """The fields of an error observation."""
    return {"is_error": True, "content": [TextContent(text=text)]}


__all__ = ["WorkspaceFileTool", "error_content"]
