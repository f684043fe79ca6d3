"""build_app's lifespan: what it starts once the server is ready."""

from __future__ import annotations

import time
from pathlib import Path

from agent_server.agent.model import ScriptedModel
from tests.support.inprocess import app_client


class CountingModel(ScriptedModel):
    def __init__(self) -> None:
        super().__init__()
        self.prewarmed: list[float] = []

    def prewarm(self) -> None:
        self.prewarmed.append(time.monotonic())


def test_the_model_starts_loading_once_the_server_is_ready(tmp_path: Path) -> None:
    model = CountingModel()
    with app_client(tmp_path, model=model) as client:
        assert client.get("/ready").status_code == 200
        deadline = time.monotonic() + 5
        while not model.prewarmed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(model.prewarmed) == 1  # without waiting for a conversation
