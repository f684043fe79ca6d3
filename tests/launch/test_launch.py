"""The launch contract (`launch/`): what a launcher writes is what the agent server reads.

Each codec is tried from both ends: the control plane's builders (the process provider's child
environment, the containers' environment, a launch's keys, the Swarm pool's claim) produce the
bytes they produced when each side spelled them itself, and the agent server's readers
(`Config`, `secrecy`, the warm server's claim) take them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent_server.config import ENV_PREFIX, Config, from_env
from agent_server.secrecy import receive_keys
from control_plane.providers import containers
from control_plane.providers.process import environment, isolation
from control_plane.providers.process.isolation import READY_FILE
from control_plane.sandboxes.provider import Launch
from launch import claim
from launch import keys as launch_keys
from launch.env import KEYS_FD, PREFIX, STANDARD, LaunchEnv
from launch.keys import Keys
from launch.ready import Ready
from tests.test_layers import ALLOWED
from web import config as web_config

KEY = "sk-session-" + "k" * 24


def test_every_launch_variable_is_one_the_server_reads() -> None:
    """The names come from one place: the server's prefix is launch's, each field of the
    launch environment is a setting of the server's (the keys' descriptor is secrecy's)."""
    assert ENV_PREFIX == PREFIX
    read = set(web_config.variables(Config, ENV_PREFIX).values())
    for name in set(LaunchEnv.model_fields) - {"keys_fd", *STANDARD}:
        [written] = LaunchEnv.model_validate(
            {name: 1 if name in ("port", "ready_fd") else "x"}
        ).environment()
        assert written in read, name
    assert KEYS_FD == "AGENT_SERVER_KEYS_FD" and KEYS_FD not in read
    # OpenTelemetry's own variable, which the server reads as the standard says.
    traces = LaunchEnv(traces_url="http://collector:4318/v1/traces").environment()
    assert from_env({"SESSION_API_KEY": KEY, **traces}).otlp_traces_endpoint == (
        "http://collector:4318/v1/traces"
    )


def test_the_server_reads_the_launch_environment_as_it_was_meant(tmp_path: Path) -> None:
    env = LaunchEnv(
        host="0.0.0.0",
        port=8000,
        webhook_url="http://10.0.0.1:3000/hooks",
        state_dir=str(tmp_path / "state"),
        working_dir=str(tmp_path / "work"),
        ready_file=str(tmp_path / "ready.json"),
        log_level="warning",
        ready_fd=4,
    )
    config = from_env({"SESSION_API_KEY": KEY, **env.environment()})
    assert (config.host, config.port, config.webhook_url) == (
        "0.0.0.0",
        8000,
        "http://10.0.0.1:3000/hooks",
    )
    assert (config.state_dir, config.working_dir) == (tmp_path / "state", tmp_path / "work")
    assert (config.ready_file, config.log_level, config.ready_fd) == (
        tmp_path / "ready.json",
        "warning",
        4,
    )


def test_the_process_providers_environment_is_unchanged(tmp_path: Path) -> None:
    launch = Launch(
        sandbox_id="sb-1",
        spec_id="process",
        root_dir=tmp_path,
        session_api_key=KEY,
        webhook_url="http://127.0.0.1:3000/api/v1/webhooks",
    )
    env = environment.child_env(launch)
    assert {k: v for k, v in env.items() if k.startswith(PREFIX)} == {
        "AGENT_SERVER_KEYS_FD": "0",
        "AGENT_SERVER_HOST": "127.0.0.1",
        "AGENT_SERVER_PORT": "0",
        "AGENT_SERVER_STATE_DIR": str(tmp_path / "state"),
        "AGENT_SERVER_WORKING_DIR": str(tmp_path / "workspace"),
        "AGENT_SERVER_READY_FILE": str(tmp_path / READY_FILE),
        "AGENT_SERVER_WEBHOOK_URL": "http://127.0.0.1:3000/api/v1/webhooks",
        "AGENT_SERVER_LOG_LEVEL": "warning",
    }
    own = environment.child_env(launch, own_network=True)
    assert (own["AGENT_SERVER_HOST"], own["AGENT_SERVER_PORT"]) == ("0.0.0.0", "8000")
    assert KEY not in json.dumps(env)
    assert (
        environment.ready_marker(tmp_path)
        == f"AGENT_SERVER_READY_FILE={tmp_path / READY_FILE}".encode()
    )


def test_a_containers_environment_is_unchanged() -> None:
    assert list(containers.environment("http://10.0.0.1:3000/hooks", 3).items()) == [
        ("AGENT_SERVER_KEYS_FD", "3"),
        ("AGENT_SERVER_WEBHOOK_URL", "http://10.0.0.1:3000/hooks"),
        ("AGENT_SERVER_STATE_DIR", "/workspace/.agent-server"),
        ("AGENT_SERVER_WORKING_DIR", "/workspace/project"),
        ("AGENT_SERVER_LOG_LEVEL", "warning"),
        ("HOME", "/home/agent"),
    ]


def test_a_launchs_keys_are_the_same_bytes_and_the_server_takes_them() -> None:
    launch = Launch(
        sandbox_id="sb-1",
        spec_id="docker",
        root_dir=Path("/workspace"),
        session_api_key=KEY,
        webhook_url="http://x",
        webhook_secret="whsec-1",
        network_url="http://10.1.0.1:8080/net",
        token="t" * 32,
    )
    assert (
        launch.keys()
        == json.dumps(
            {
                "SESSION_API_KEY": KEY,
                "AGENT_SERVER_WEBHOOK_SECRET": "whsec-1",
                "AGENT_SERVER_WEBHOOK_SENDER": "sb-1",
                "AGENT_SERVER_NETWORK_URL": "http://10.1.0.1:8080/net",
                "AGENT_SERVER_NETWORK_TOKEN": "t" * 32,
            }
        ).encode()
    )
    bare = Launch(
        sandbox_id="sb-1",
        spec_id="docker",
        root_dir=Path("/workspace"),
        session_api_key=KEY,
        webhook_url="http://x",
        webhook_secret="",
        network_url="http://10.1.0.1:8080/net",
    )
    assert bare.keys() == json.dumps({"SESSION_API_KEY": KEY}).encode()

    read, write = os.pipe()
    os.write(write, launch.keys())
    os.close(write)
    environ = {KEYS_FD: str(read)}
    receive_keys(environ)
    config = from_env(environ)
    assert config.session_api_keys == (KEY,)
    assert (config.webhook_secret, config.webhook_sender) == ("whsec-1", "sb-1")
    assert (config.network_url, config.network_token) == ("http://10.1.0.1:8080/net", "t" * 32)


def test_every_key_name_is_one_the_server_reads() -> None:
    read = set(web_config.variables(Config, ENV_PREFIX).values()) | {"SESSION_API_KEY"}
    assert launch_keys.NAMES <= read
    assert launch_keys.NAMES == {
        "SESSION_API_KEY",
        "AGENT_SERVER_WEBHOOK_API_KEY",
        "AGENT_SERVER_WEBHOOK_SECRET",
        "AGENT_SERVER_WEBHOOK_SENDER",
        "AGENT_SERVER_NETWORK_URL",
        "AGENT_SERVER_NETWORK_TOKEN",
    }


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]",
        b'"k"',
        b'{"SESSION_API_KEY": 1}',
        b'{"AGENT_SERVER_HOST": "0.0.0.0"}',
        b'{"PATH": "/tmp"}',
        b"\xff",
    ],
)
def test_the_pipe_carries_keys_and_nothing_else(data: bytes) -> None:
    with pytest.raises(ValueError):
        launch_keys.decode(data)


def test_keys_round_trip() -> None:
    keys = Keys(session_api_key=KEY, webhook_api_key="hook")
    assert launch_keys.decode(keys.encode()) == {
        "SESSION_API_KEY": KEY,
        "AGENT_SERVER_WEBHOOK_API_KEY": "hook",
    }


def test_ready_is_the_same_json_on_the_pipe_and_in_the_file(tmp_path: Path) -> None:
    said = Ready(port=43211, pid=77)
    assert said.encode() == b'{"port": 43211, "pid": 77}'
    said.write(tmp_path / "ready.json")
    assert json.loads((tmp_path / "ready.json").read_text()) == {"port": 43211, "pid": 77}
    assert Ready.read(tmp_path / "ready.json") == said == Ready.decode(said.encode())
    assert Ready.decode('{"port": 8000}').pid is None
    for bad in (b"", b"[]", b'{"pid": 1}', b'{"port": "x"}'):
        with pytest.raises(ValueError):
            Ready.decode(bad)
    with pytest.raises(OSError):
        Ready.read(tmp_path / "absent.json")


def test_the_claim_secret_and_request() -> None:
    token = "claim-token-0123456789abcdef"
    assert claim.secret(token) == json.dumps({"claim": token}).encode()
    assert claim.token_of(claim.secret(token)) == token
    for bad in (b"", b"[]", b"{}", b'"claim"'):
        with pytest.raises(ValueError) as raised:
            claim.token_of(bad)
        assert not isinstance(raised.value, claim.WeakToken)
    for weak in (b'{"claim": "short"}', b'{"claim": 12345678901234567890}'):
        with pytest.raises(claim.WeakToken):
            claim.token_of(weak)
    headers = claim.headers(token)
    assert headers == {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    assert claim.authorized(headers["Authorization"], token)
    assert not claim.authorized("Bearer " + token[:-1], token)
    assert not claim.authorized("", token)


def test_an_isolated_sandbox_sees_every_package_its_server_imports() -> None:
    """bubblewrap binds the agent server's packages one by one: the floors it may import."""
    assert set(isolation.PACKAGES) == {"agent_server"} | ALLOWED["agent_server"]
