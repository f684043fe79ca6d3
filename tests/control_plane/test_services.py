"""Closing the control plane's services: every part is closed, the database last, even when
a part before it fails (a provider whose engine has gone, here); a reconciler round's takeover
of the unfinished starts."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from control_plane.leases import TASK
from control_plane.models import StartTaskStatus
from control_plane.providers.process.provider import ProcessProvider
from control_plane.providers.process.settings import ProcessSettings
from control_plane.services import Services
from control_plane.store import accounts, tasks
from control_plane.store import leases as lease_rows
from tests.control_plane.support import make_config


class Stubborn(ProcessProvider):
    async def close(self) -> None:
        await super().close()
        raise RuntimeError("the engine has gone")


async def test_a_part_that_fails_to_close_leaves_no_database_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    services = Services.build(
        make_config(tmp_path / "cp"), Stubborn(ProcessSettings(tmp_path / "archives"))
    )
    await services.start()
    closed: list[str] = []
    close_database = services.db.close

    async def close() -> None:
        closed.append("database")
        await close_database()

    services.db.close = close  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR):
        await services.close()
    assert closed == ["database"]
    assert "closing the sandboxes failed" in caplog.text and "the engine has gone" in caplog.text


async def test_a_start_this_process_finishes_while_it_looks_for_orphans_is_not_worked_again(
    tmp_path: Path,
) -> None:
    """A reconciler round reads the unfinished starts (this process's own among them), and
    claims each; one whose job stored READY and let its lease go in between is read again and
    left alone. Worked again from the stale row, it failed with "READY cannot go to
    WAITING_FOR_SANDBOX" and removed the conversation the user had just started (CI saw it)."""
    services = Services.build(
        make_config(tmp_path / "cp"), ProcessProvider(ProcessSettings(tmp_path / "archives"))
    )
    await services.db.migrate()
    user = await accounts.get_or_create_user(services.db, "hal")
    async with services.db.begin() as conn:
        task = await tasks.insert(services.db, "t1", user.id, services.cipher.encrypt("{}"), conn)
    claim = services.leases.claim

    async def finished_meanwhile(kind: str, key: str) -> bool:
        for stage in (
            StartTaskStatus.WAITING_FOR_SANDBOX,
            StartTaskStatus.STARTING_CONVERSATION,
            StartTaskStatus.READY,
        ):  # what this process's own job did
            await tasks.set_status(services.db, key, stage)
        return await claim(kind, key)

    services.leases.claim = finished_meanwhile  # type: ignore[method-assign]
    try:
        assert await services.tasks.take_over() == 0
        stored = (await tasks.get_many(services.db, [task.id], user.id))[task.id]
        assert (stored.status, stored.detail) == (StartTaskStatus.READY, None)
        assert await lease_rows.holder_of(services.db, TASK, task.id) is None
    finally:
        await services.close()
