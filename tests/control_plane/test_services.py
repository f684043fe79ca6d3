"""Closing the control plane's services: every part is closed, the database last, even when
a part before it fails (a provider whose engine has gone, here)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from control_plane.providers.process.provider import ProcessProvider
from control_plane.services import Services
from tests.control_plane.support import make_config


class Stubborn(ProcessProvider):
    async def close(self) -> None:
        await super().close()
        raise RuntimeError("the engine has gone")


async def test_a_part_that_fails_to_close_leaves_no_database_open(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    services = Services.build(make_config(tmp_path / "cp"), Stubborn(tmp_path / "archives"))
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
