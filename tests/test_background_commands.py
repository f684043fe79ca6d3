"""Background commands (agent_server.commands), in-process: the list kept per scope stays bounded,
running commands included."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_server import commands
from agent_server.commands import Commands
from agent_server.workspace import Scope
from core.masking import Masker
from web.errors import Conflict


async def test_a_full_scope_of_running_commands_refuses_another_until_one_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commands, "MAX_KEPT", 3)
    scope = Scope("host", (tmp_path,), {}, Masker({}))
    kept = Commands()
    try:
        running = [await kept.start(scope, "sleep 30", None, 60) for _ in range(3)]
        with pytest.raises(Conflict, match="3 background commands are still running"):
            await kept.start(scope, "echo one-too-many", None, 60)
        assert len(kept.search(scope, kind="BashCommand")) == 3  # nothing was added
        assert await kept.stop(scope, running[0].id)
        again = await kept.start(scope, "echo room-again", None, 60)
        ids = [c.id for c in kept.search(scope, kind="BashCommand")]
        assert running[0].id not in ids and again.id in ids and len(ids) == 3
    finally:
        await kept.close()
