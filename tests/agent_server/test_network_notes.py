"""agent_server.network: what the sandbox's network policy refused, told to the model under a
failed command and counted in /metrics.

The control plane's side is a real HTTP server on a loopback port serving the state JSON to the
sandbox's Bearer token (`StateServer`); the agent server is the real one, in-process, its
terminal running real commands for a ScriptedModel.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agent_server.agent.model import Scripted, ScriptedModel
from agent_server.config import ENV_PREFIX, Config, ConfigError, from_env
from agent_server.network import (
    MAX_LISTED,
    MAX_SHOWN_RULES,
    NetworkClient,
    NetworkState,
    note,
)
from agent_server.record import SendMessage
from agent_server.secrecy import receive_keys
from events import ActionEvent, Event, ObservationEvent
from launch.env import KEYS_FD
from tests.support.inprocess import InProcess, events, new_conversation, run_ends, serve
from tests.support.llm import free_port
from tests.support.threaded import ThreadedServer
from web import config as web_config

TOKEN = "sbx-network-token-" + "t" * 24
PATH = "/api/v1/sandboxes/sb-1/network"
ALLOWLIST = {"mode": "allowlist", "allow": ["pypi.org:443", "*.github.com"]}
FAIL = "sh -c 'exit 3'"


class StateServer:
    """The control plane's sandbox-side network route: the state JSON to the right token, 401
    to any other. `hold` keeps each request waiting until the test ends (a control plane that
    never answers)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.state: dict[str, Any] = {
            "policy": ALLOWLIST,
            "enforced": True,
            "refused": 0,
            "recent": [],
        }
        self.hold = False
        self.released = threading.Event()
        self.authorizations: list[str] = []
        self._lock = threading.Lock()
        app = Starlette(routes=[Route(PATH, self._network)])
        self._server = ThreadedServer(app, self.port, "network-state")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{PATH}"

    @property
    def asked(self) -> int:
        with self._lock:
            return len(self.authorizations)

    def refusals(self, *recent: tuple[str, str, int, int], refused: int = 3) -> None:
        self.state = {
            **self.state,
            "refused": refused,
            "recent": [
                {"address": a, "protocol": p, "port": port, "seconds_ago": ago}
                for a, p, port, ago in recent
            ],
        }

    async def _network(self, request: Request) -> Response:
        authorization = request.headers.get("authorization", "")
        with self._lock:
            self.authorizations.append(authorization)
        if authorization != f"Bearer {TOKEN}":
            return JSONResponse({"detail": "not this sandbox's token"}, status_code=401)
        while self.hold and not self.released.is_set():
            await asyncio.sleep(0.02)
        return JSONResponse(self.state)

    def __enter__(self) -> StateServer:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self._server.stop()


@pytest.fixture
def plane() -> Iterator[StateServer]:
    with StateServer() as server:
        yield server


@pytest.fixture
async def sandbox(
    tmp_path: Path, model: ScriptedModel, plane: StateServer
) -> AsyncIterator[InProcess]:
    """The agent server told where its network state is, with the sandbox's token."""
    async with serve(tmp_path, model, network_url=plane.url, network_token=TOKEN) as running:
        yield running


async def terminal(
    srv: InProcess, model: ScriptedModel, workspace: Path, command: str, **arguments: Any
) -> tuple[ObservationEvent, list[Event]]:
    """One conversation whose agent runs `command` in the terminal; its observation and every
    event of the conversation."""
    model.script += [
        Scripted(calls=[("terminal", json.dumps({"command": command, **arguments}))]),
        Scripted(content="done"),
    ]
    conv = await new_conversation(srv, workspace, ["terminal"])
    await conv.send_message(
        SendMessage.model_validate({"content": [{"type": "text", "text": "go"}], "run": True})
    )
    await run_ends(conv)
    stored = await events(conv)
    [observed] = [e for e in stored if isinstance(e, ObservationEvent)]
    return observed, stored


def text(observed: ObservationEvent) -> str:
    return observed.observation.text


# -- the note under a failed command -------------------------------------------------------------


async def test_a_failed_command_is_told_what_the_policy_refused_meanwhile(
    sandbox: InProcess, model: ScriptedModel, plane: StateServer, tmp_path: Path
) -> None:
    plane.refusals(
        ("10.0.0.5", "tcp", 5432, 0),
        ("203.0.113.9", "udp", 443, 1),
        ("198.51.100.7", "tcp", 80, 300),
    )  # the last: long before this command
    observed, _ = await terminal(sandbox, model, tmp_path / "ws", FAIL)
    line = (
        "[This sandbox's network policy (allowlist) refused connections to 2 destinations "
        "during this command: tcp 10.0.0.5:5432, udp 203.0.113.9:443. It allows only, over "
        "TCP: pypi.org:443, *.github.com. Other hosts, this machine, private ranges and "
        "other sandboxes are never reachable.]"
    )
    assert line in text(observed)
    assert observed.observation.metadata.suffix == line  # type: ignore[union-attr]
    assert observed.observation.exit_code == 3  # type: ignore[union-attr]
    # Before the trailer, as the terminal's other notes are.
    assert text(observed).index(line) < text(observed).index("[Command finished with exit code 3]")
    assert plane.authorizations == [f"Bearer {TOKEN}"]


async def test_a_command_that_reaches_its_timeout_is_told_too(
    sandbox: InProcess, model: ScriptedModel, plane: StateServer, tmp_path: Path
) -> None:
    plane.refusals(("10.0.0.5", "tcp", 5432, 0))
    observed, _ = await terminal(sandbox, model, tmp_path / "ws", "sleep 60", timeout=0.5)
    assert observed.observation.timeout  # type: ignore[union-attr]
    assert "refused connections to 1 destination during this command: tcp 10.0.0.5:5432." in text(
        observed
    )


async def test_a_successful_command_asks_nothing(
    sandbox: InProcess, model: ScriptedModel, plane: StateServer, tmp_path: Path
) -> None:
    plane.refusals(("10.0.0.5", "tcp", 5432, 0))
    observed, _ = await terminal(sandbox, model, tmp_path / "ws", "echo fine")
    assert "network policy" not in text(observed)
    assert plane.asked == 0


async def test_a_command_still_running_asks_nothing(
    tmp_path: Path, model: ScriptedModel, plane: StateServer
) -> None:
    plane.refusals(("10.0.0.5", "tcp", 5432, 0))
    quiet = {
        "llm": {"model": "scripted/test"},
        "tools": [{"name": "terminal", "params": {"no_output_timeout": 0.3}}],
    }
    async with serve(tmp_path, model, network_url=plane.url, network_token=TOKEN) as srv:
        model.script += [
            Scripted(calls=[("terminal", '{"command": "sleep 60"}')]),
            Scripted(content="done"),
        ]
        conv = await new_conversation(srv, tmp_path / "ws", agent=quiet)
        await conv.send_message(
            SendMessage.model_validate({"content": [{"type": "text", "text": "go"}], "run": True})
        )
        await run_ends(conv)
        [observed] = await events(conv, ObservationEvent)
    assert observed.observation.exit_code == -1  # type: ignore[union-attr]
    assert "still running" in text(observed) and "network policy" not in text(observed)
    assert plane.asked == 0


async def test_a_refusal_from_before_the_command_is_not_its_business(
    sandbox: InProcess, model: ScriptedModel, plane: StateServer, tmp_path: Path
) -> None:
    plane.refusals(("10.0.0.5", "tcp", 5432, 120))
    observed, _ = await terminal(sandbox, model, tmp_path / "ws", FAIL)
    assert "network policy" not in text(observed)
    assert "[Command finished with exit code 3]" in text(observed)
    assert plane.asked == 1


@pytest.mark.parametrize("failure", ["never answers", "is down"])
async def test_a_silent_control_plane_costs_at_most_the_timeout(
    tmp_path: Path, model: ScriptedModel, plane: StateServer, failure: str
) -> None:
    plane.refusals(("10.0.0.5", "tcp", 5432, 0))
    plane.hold = True
    url = plane.url if failure == "never answers" else f"http://127.0.0.1:{free_port()}{PATH}"
    async with serve(tmp_path, model, network_url=url, network_token=TOKEN) as srv:
        # The held request is never answered while the run goes on: the observation comes
        # because the client gives up (TIMEOUT), not because the state arrives.
        observed, _ = await terminal(srv, model, tmp_path / "ws", FAIL)
    assert "network policy" not in text(observed)
    assert "[Command finished with exit code 3]" in text(observed)
    assert plane.asked == (1 if failure == "never answers" else 0)
    assert not plane.released.is_set()


async def test_the_token_is_in_no_event_and_no_log_line(
    sandbox: InProcess,
    model: ScriptedModel,
    plane: StateServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    plane.refusals(("10.0.0.5", "tcp", 5432, 0))
    # Even an agent that somehow learnt it and prints it: masked like the server's other keys.
    observed, stored = await terminal(sandbox, model, tmp_path / "ws", f"echo {TOKEN}; {FAIL}")
    assert "<secret-hidden>" in text(observed) and "network policy" in text(observed)
    [action] = [e for e in stored if isinstance(e, ActionEvent)]
    assert "<secret-hidden>" in action.model_dump_json()
    assert not [e for e in stored if TOKEN in e.model_dump_json()]
    await sandbox.client.get("/metrics")
    assert caplog.records and not [r for r in caplog.records if TOKEN in r.getMessage()]
    assert plane.authorizations == [f"Bearer {TOKEN}"] * 2


# -- /metrics --------------------------------------------------------------------------------------


async def test_metrics_show_the_refusals_as_the_control_plane_counts_them(
    sandbox: InProcess, plane: StateServer
) -> None:
    plane.refusals(refused=3)
    scrape = (await sandbox.client.get("/metrics")).text
    assert "agent_server_network_refused_total 3.0" in scrape.splitlines()
    plane.refusals(refused=5)  # read anew at each scrape
    scrape = (await sandbox.client.get("/metrics")).text
    assert "agent_server_network_refused_total 5.0" in scrape.splitlines()


async def test_metrics_leave_the_count_out_without_a_network_or_its_answer(
    tmp_path: Path, plane: StateServer
) -> None:
    async with serve(tmp_path / "none") as srv:
        assert "network_refused" not in (await srv.client.get("/metrics")).text
    async with serve(tmp_path / "wrong", network_url=plane.url, network_token="not-it") as srv:
        assert "network_refused" not in (await srv.client.get("/metrics")).text
    assert plane.authorizations == ["Bearer not-it"]


# -- the client ------------------------------------------------------------------------------------


async def test_the_client_ignores_new_fields_and_keeps_the_newest_count(plane: StateServer) -> None:
    client = NetworkClient(plane.url, TOKEN)
    try:
        plane.state = {
            **plane.state,
            "refused": 7,
            "since": "later",
            "recent": [
                {
                    "address": "2001:db8::1",
                    "protocol": "tcp",
                    "port": 443,
                    "seconds_ago": 0,
                    "hits": 4,
                }
            ],
        }
        state = await client.state()
        assert state is not None and state.refused == 7 and client.last_refused == 7
        assert await client.refused(1.0) == (
            "[This sandbox's network policy (allowlist) refused connections to 1 destination "
            "during this command: tcp [2001:db8::1]:443. It allows only, over TCP: "
            "pypi.org:443, *.github.com. Other hosts, this machine, private ranges and other "
            "sandboxes are never reachable.]"
        )
        plane.state = {**plane.state, "refused": None, "enforced": False}
        await client.refresh()
        assert client.last_refused == 7  # unknown now: the last count stands
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    "answer", [b"not json", b'{"policy": {"mode": "wide"}}', b'{"recent": []}', b"[]"]
)
async def test_the_client_says_nothing_of_an_answer_that_is_not_the_state(answer: bytes) -> None:
    async def reply(request: Request) -> Response:
        return Response(answer, media_type="application/json")

    port = free_port()
    server = ThreadedServer(Starlette(routes=[Route(PATH, reply)]), port, "bad-state")
    server.start()
    client = NetworkClient(f"http://127.0.0.1:{port}{PATH}", TOKEN)
    try:
        assert await client.state() is None
        assert await client.refused(60) is None and client.last_refused is None
    finally:
        await client.aclose()
        server.stop()


async def test_the_client_gives_up_within_its_timeout(plane: StateServer) -> None:
    plane.hold = True
    plane.refusals(("10.0.0.5", "tcp", 5432, 0))
    client = NetworkClient(plane.url, TOKEN, timeout=0.2)
    try:
        assert await client.refused(60) is None
        assert plane.asked == 1 and not plane.released.is_set()
    finally:
        await client.aclose()


# -- the note's words ------------------------------------------------------------------------------


def state(mode: str, allow: list[str], recent: list[dict[str, Any]]) -> NetworkState:
    return NetworkState.model_validate(
        {
            "policy": {"mode": mode, "allow": allow},
            "enforced": True,
            "refused": len(recent),
            "recent": recent,
        }
    )


def refusal(n: int, ago: int = 0) -> dict[str, Any]:
    return {"address": f"203.0.113.{n}", "protocol": "tcp", "port": 443, "seconds_ago": ago}


def test_each_mode_says_what_it_allows() -> None:
    assert note(state("open", [], [refusal(1)]), 5) == (
        "[This sandbox's network policy (open) refused connections to 1 destination during "
        "this command: tcp 203.0.113.1:443. It allows the public internet; never this "
        "machine, private or link-local ranges, or other sandboxes.]"
    )
    assert note(state("none", [], [refusal(1)]), 5) == (
        "[This sandbox's network policy (none) refused connections to 1 destination during "
        "this command: tcp 203.0.113.1:443. It allows no connection beyond the control plane.]"
    )
    assert "Its allow list is empty." in (note(state("allowlist", [], [refusal(1)]), 5) or "")


def test_the_window_is_the_commands_run_and_a_second() -> None:
    recent = [refusal(1, 0), refusal(2, 5), refusal(3, 6), refusal(4, 7)]
    assert "203.0.113.3" in (note(state("none", [], recent), 5) or "")
    assert "203.0.113.4" not in (note(state("none", [], recent), 5) or "")
    assert note(state("none", [], [refusal(1, 30)]), 5) is None
    assert note(state("none", [], []), 600) is None


def test_the_note_stays_short_whatever_was_refused() -> None:
    rules = [f"host{n}.example.com:443" for n in range(300)]
    many = state("allowlist", rules, [refusal(n) for n in range(150)])
    assert len(many.recent) == 100 and len(many.policy.allow) == 256  # cut, not refused
    said = note(many, 5) or ""
    assert "refused connections to 100 destinations" in said
    assert f"203.0.113.{MAX_LISTED - 1}:443 and {100 - MAX_LISTED} more." in said
    assert f"203.0.113.{MAX_LISTED}:" not in said
    assert f"host{MAX_SHOWN_RULES - 1}.example.com:443 and {256 - MAX_SHOWN_RULES} more." in said
    assert len(said) < 1500


# -- how the URL and token arrive ------------------------------------------------------------------


def test_the_keys_pipe_hands_over_the_network_url_and_token() -> None:
    read, write = os.pipe()
    os.write(
        write,
        json.dumps(
            {
                "SESSION_API_KEY": "k" * 32,
                "AGENT_SERVER_NETWORK_URL": "http://10.1.0.1:8080" + PATH,
                "AGENT_SERVER_NETWORK_TOKEN": TOKEN,
            }
        ).encode(),
    )
    os.close(write)
    environ = {KEYS_FD: str(read)}
    receive_keys(environ)
    config = from_env(environ)
    assert config.network_url == "http://10.1.0.1:8080" + PATH
    assert config.network_token == TOKEN
    assert TOKEN in config.own_keys().values()  # masked in every event
    flags = {s.path[0]: s.flag for s in web_config.settings(Config, ENV_PREFIX)}
    assert flags["network_token"] is None  # never on a command line
    assert flags["network_url"] == "--network-url"


def test_a_network_url_without_its_token_is_refused() -> None:
    config = from_env(
        {"SESSION_API_KEY": "k" * 32, "AGENT_SERVER_NETWORK_URL": "http://10.1.0.1:8080" + PATH}
    )
    with pytest.raises(ConfigError, match="AGENT_SERVER_NETWORK_TOKEN"):
        config.check()
