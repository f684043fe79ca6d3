"""sandbox.Dockerfile: linted, and its entrypoint and environment start the server as the image
would (the command line run directly with paths mapped: quick, and Docker-free; the image itself
is built and run by tests/control_plane/sandboxes/test_docker.py where Docker is installed)."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.llm import free_port
from tests.support.wait import wait_for

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "sandbox.Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in instructions():
        if word == "ENV":
            for pair in shlex.split(rest):
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def entrypoint() -> list[str]:
    """The server's command line, without the init (tini --) in front of it."""
    command = next(json.loads(rest) for word, rest in instructions() if word == "ENTRYPOINT")
    return command[command.index("--") + 1 :] if command[0] == "tini" else command


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run([str(hadolint), str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_image_shape() -> None:
    words = [w for w, _ in instructions()]
    # Any Debian-based Python image is a base; the official slim one unless told otherwise.
    assert instructions()[0] == ("ARG", "BASE_IMAGE=python:3.11-slim-bookworm")
    # Two stages on that base: what the build needs never reaches the image (the last stage),
    # which takes nothing from the build but the virtual environment.
    stages = [rest for word, rest in instructions() if word == "FROM"]
    assert stages == ["${BASE_IMAGE} AS build", "${BASE_IMAGE}"]
    last = instructions()[words.index("FROM", 2) :]
    copied = [rest for word, rest in last if word == "COPY"]
    assert copied == ["--from=build /opt/agent-server/venv /opt/agent-server/venv"]
    assert not any("pip " in rest for word, rest in last if word == "RUN")
    assert {"EXPOSE", "HEALTHCHECK", "USER", "VOLUME", "ENTRYPOINT"} <= set(words)
    user = next(rest for word, rest in instructions() if word == "USER")
    assert not user.startswith(("0", "root"))
    assert entrypoint()[0] == "agent-server"
    env = image_env()
    assert env["AGENT_SERVER_STATE_DIR"] == "/workspace/.agent-server"
    assert "SESSION_API_KEY" not in env  # a key never lives in the image


def test_the_image_leaves_out_no_package_the_server_imports() -> None:
    """The build installs pyproject's dependencies but the control plane's own
    (CONTROL_PLANE_ONLY): no module of the image's packages may import one of those."""
    left_out = next(
        rest
        for word, rest in instructions()
        if word == "ARG" and rest.startswith("CONTROL_PLANE_ONLY=")
    )
    names = set(shlex.split(left_out.partition("=")[2])[0].split())
    assert "sqlalchemy" in names
    packages = [
        rest.split()[0]
        for word, rest in instructions()
        if word == "COPY"
        and rest.split()[0]
        in ("core", "launch", "agent_server", "tools", "events", "web", "control_plane/network")
    ]
    assert len(packages) == 7  # (a swarm node's fence is control_plane.network, from this image)
    imported: dict[str, str] = {}
    for package in packages:
        for module in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(module.read_text())):
                found = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module]
                    if isinstance(node, ast.ImportFrom) and node.module and not node.level
                    else []
                )
                for name in found:
                    imported[name.split(".")[0]] = str(module.relative_to(ROOT))
    assert {n: imported[n] for n in names if n in imported} == {}
    assert {"litellm", "playwright", "opentelemetry"} <= set(imported)  # the walk sees imports


def run_image(
    tmp_path: Path, extra_env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], int, Path]:
    """The entrypoint with the image's environment; image paths mapped into tmp_path."""
    port = free_port()
    state, workspace = tmp_path / "state", tmp_path / "workspace"
    mapping = {
        "/workspace/.agent-server": str(state),
        "/workspace/project": str(workspace),
        "8000": str(port),
    }
    fix = lambda v: mapping.get(v, v)  # noqa: E731
    # The image's own virtual environment (PATH, VIRTUAL_ENV) is this interpreter's here.
    env = {k: fix(v) for k, v in image_env().items() if k not in ("PATH", "VIRTUAL_ENV")}
    args = [fix(a) for a in entrypoint()[1:]]
    base = {k: v for k, v in os.environ.items() if k != "SESSION_API_KEY"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_server", *args],
        env={**base, **env, **extra_env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return proc, port, state


def test_entrypoint_refuses_to_serve_without_a_key(tmp_path: Path) -> None:
    proc, _, _ = run_image(tmp_path, {})
    out = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode != 0
    assert "SESSION_API_KEY" in out


def test_entrypoint_serves_with_the_key_and_passes_the_healthcheck(tmp_path: Path) -> None:
    proc, port, state = run_image(tmp_path, {"SESSION_API_KEY": "image-key"})
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _ok(url + "/ready"), timeout=30, what="the server of the image")
        health = next(rest for word, rest in instructions() if word == "HEALTHCHECK")
        command = json.loads(health[health.index("CMD") + 3 :].strip())
        command = [c.replace("8000", str(port)) for c in command]
        assert (
            subprocess.run(
                [sys.executable if c == "python" else c for c in command], timeout=10
            ).returncode
            == 0
        )
        r = httpx.post(
            url + "/api/conversations",
            headers={"X-Session-API-Key": "image-key"},
            json={"agent": {"llm": {"model": "openai/x"}}},
        )
        assert r.status_code == 201, r.text
        assert r.json()["workspace"]["working_dir"] == str(tmp_path / "workspace")
        assert (state / "conversations").is_dir()
    finally:
        proc.terminate()
        proc.communicate(timeout=20)  # reads and closes its output pipe, unlike wait()


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
