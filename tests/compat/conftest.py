"""The compatibility tier: the real OpenHands SDK client (1.58.0, in its own cached Python 3.12
venv) drives a real agent server with the scripted LLM; and the app server's clients (the Cloud
workspace of openhands-workspace 1.58.0 from the same venv, the web frontend's and the API
skill client's requests) drive a real control plane (test_cloud_workspace, test_frontend_calls).

Each test runs one script of `tests/compat/scripts/` with that venv's python; the script
prints `RESULT <json>` (its steps, the frames it saw, the stored events) and the test judges.
`AGENT_SERVER_COMPAT_TARGET=reference` runs the same tests against the reference server
(`openhands-agent-server` 1.58.0), which is how the scripts themselves are checked.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compat import sdk_env
from tests.support.llm import Reply, ScriptedLLM, text
from tests.support.server import KEY, ServerProcess

SCRIPTS = Path(__file__).parent / "scripts"
TARGET = os.environ.get("AGENT_SERVER_COMPAT_TARGET", "ours")


@pytest.fixture(scope="session")
def sdk_python() -> Path:
    """The SDK venv's python; skips (with the reason) only where no Python >= 3.12 exists."""
    try:
        return sdk_env.sdk_python()
    except sdk_env.SdkUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def compat_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if TARGET == "reference":
        from tests.compat.reference import ReferenceServer

        try:
            python = sdk_env.reference_python()
        except sdk_env.SdkUnavailable as exc:
            pytest.skip(str(exc))
        proc: Any = ReferenceServer(python, tmp_path_factory.mktemp("reference") / "state").start()
    else:
        proc = ServerProcess(tmp_path_factory.mktemp("server") / "state").start()
    yield proc
    proc.stop()


class SdkRun:
    """What one script did: its steps in order, frames and stored events per conversation."""

    def __init__(self, result: dict[str, Any], stdout: str, stderr: str) -> None:
        self.result = result
        self.stdout = stdout
        self.stderr = stderr

    @property
    def steps(self) -> list[dict[str, Any]]:
        return self.result.get("steps", [])

    def failed(self) -> dict[str, Any] | None:
        return next((s for s in self.steps if not s["ok"]), None)

    def _seen(self) -> dict[str, Any]:
        """The run's result without its long parts (its steps, frames and stored events)."""
        return {k: v for k, v in self.result.items() if k not in ("steps", "frames", "stored")}

    def assert_ok(self) -> None:
        bad = self.failed()
        if bad is not None:
            done = [s["name"] for s in self.steps if s["ok"]]
            raise AssertionError(
                f"SDK call failed at step {bad['name']!r}: {bad.get('error')}\n"
                f"steps that passed: {done}\n{bad.get('traceback', '')[-1500:]}\n"
                f"seen: {json.dumps(self._seen())[:3000]}"
            )

    def assert_valid_frames_and_events(self) -> None:
        problems = []
        for cid, frames in self.result.get("frames", {}).items():
            if frames.get("invalid"):
                problems.append(f"{cid} frames: {frames['invalid'][:3]}")
        for cid, stored in self.result.get("stored", {}).items():
            if stored.get("error") or stored.get("invalid"):
                problems.append(f"{cid} stored: {stored.get('error') or stored['invalid'][:3]}")
        assert not problems, "\n".join(problems)

    def __getitem__(self, key: str) -> Any:
        return self.result[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.result.get(key, default)


def _title_request(key: str, body: dict[str, Any]) -> Reply | None:
    """The reference server asks the LLM for a title after the first message (concurrently
    with the run): answer it aside so that it never takes a scripted reply."""
    messages = body.get("messages") or []
    first = json.dumps(messages[:1])
    if not body.get("tools") and "generates concise, descriptive titles" in first:
        return text("Compat title")
    return None


@pytest.fixture
def run_sdk(sdk_python: Path, compat_server: Any, tmp_path: Path, llm: ScriptedLLM):
    llm.interceptor = _title_request

    def run(script: str, llm_base_url: str, timeout: float = 240, **args: Any) -> SdkRun:
        workspace = args.pop("workspace", None) or tmp_path / "ws"
        Path(workspace).mkdir(parents=True, exist_ok=True)
        payload = {
            "host": compat_server.url,
            "api_key": KEY,
            "llm_base_url": llm_base_url,
            "workspace": str(workspace),
            **args,
        }
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(
            {
                "COMPAT_ARGS": json.dumps(payload),
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "OPENHANDS_SUPPRESS_BANNER": "1",
                "LOG_LEVEL": "WARNING",
            }
        )
        proc = subprocess.run(
            [str(sdk_python), str(SCRIPTS / script)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        line = next(
            (ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("RESULT ")), None
        )
        if line is None:
            raise AssertionError(
                f"{script} printed no RESULT (exit {proc.returncode}):\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return SdkRun(json.loads(line[len("RESULT ") :]), proc.stdout, proc.stderr)

    return run
