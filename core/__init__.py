"""Infrastructure shared by the agent server, its tools and the control plane.

    core/
      content.py    message content, tool calls, tool definitions (the schema types events carry)
      ids.py        event ids (ULID), environment names, ${NAME} placeholders
      masking.py    secrets kept out of text (Masker) and out of responses (redact)
      retry.py      Clock, Backoff, Retry-After
      processes.py  child environments, bounded runs, killing a whole process tree, /proc
      files.py      atomic file replacement, small JSON files

The rule: `core` is a leaf. It imports the standard library, pydantic and python-ulid, and
nothing of `agent_server`, `tools` or the control plane, so any of them can import it without
a cycle. Import the submodules (`from core.masking import Masker`); this package re-exports
nothing, so importing one does not load the others.
"""

__all__ = ["content", "files", "ids", "masking", "processes", "retry"]
