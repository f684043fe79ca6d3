"""A warm pool's parked server in claim mode (`python -m agent_server.warm --claim`), as a
Swarm pool's service runs it: its port takes one authenticated claim that hands it its keys,
answers anyone else with 403 and stays parked, and ends by itself when its lifeline stops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.llm import free_port
from tests.support.wait import wait_for

TOKEN = "claim-token-0123456789abcdef"
KEY = "sk-claimed-session-key-42"


class Parked:
    def __init__(self, tmp_path: Path, lifeline: float) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "AGENT_SERVER_KEYS_FD": "0",
            "AGENT_SERVER_STATE_DIR": str(tmp_path / "state"),
        }
        self.log = tmp_path / "warm.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "agent_server.warm",
                    "--claim",
                    str(lifeline),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                stdin=subprocess.PIPE,
                stderr=log,
                env=env,
            )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"claim": TOKEN}).encode())
        self.proc.stdin.close()
        wait_for(self.parked, 60, what="the parked server's port")

    def parked(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()
        try:
            return httpx.get(self.url + "/parked", timeout=5).status_code == 204
        except httpx.HTTPError:
            return False

    def claim(self, token: str, keys: dict[str, str]) -> int:
        return httpx.post(
            self.url + "/claim", headers={"Authorization": f"Bearer {token}"}, json=keys, timeout=10
        ).status_code


@pytest.fixture
def parked(tmp_path: Path) -> Iterator[Parked]:
    server = Parked(tmp_path, lifeline=60)
    yield server
    server.proc.kill()
    server.proc.wait()


def test_one_claim_with_the_token_hands_the_server_its_keys(parked: Parked) -> None:
    # Anyone else: refused, and it stays parked (not serving, not claimed).
    assert parked.claim("wrong-token", {"SESSION_API_KEY": "sk-attacker"}) == 403
    assert parked.claim(TOKEN[:-1], {"SESSION_API_KEY": "sk-attacker"}) == 403
    assert httpx.get(parked.url + "/alive", timeout=5).status_code == 404
    assert parked.parked()
    # The token with what are not keys: refused, still parked.
    assert parked.claim(TOKEN, {"CONTROL_PLANE_SECRET_KEY": "sk-x"}) == 422
    assert parked.parked()

    assert parked.claim(TOKEN, {"SESSION_API_KEY": KEY}) == 204
    wait_for(lambda: _alive(parked.url), 60, what="the claimed server")
    search = parked.url + "/api/conversations/search"
    assert httpx.get(search, headers={"X-Session-API-Key": KEY}).status_code == 200
    assert httpx.get(search, headers={"X-Session-API-Key": "sk-attacker"}).status_code == 401
    # Claimed once: the port is the server's now, and no second claim exists.
    assert httpx.post(
        parked.url + "/claim",
        headers={"Authorization": f"Bearer {TOKEN}"},
        json={"SESSION_API_KEY": "sk-second"},
    ).status_code in (401, 404, 405)


def test_without_its_lifeline_a_parked_server_ends(tmp_path: Path) -> None:
    server = Parked(tmp_path, lifeline=1)
    try:
        assert server.proc.wait(60) == 0  # nobody asked /parked for a second
    finally:
        server.proc.kill()


def _alive(url: str) -> bool:
    try:
        return httpx.get(url + "/alive", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False
