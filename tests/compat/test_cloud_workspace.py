"""The OpenHands Cloud workspace (`OpenHandsCloudWorkspace`, openhands-workspace 1.58),
unchanged, against a real control plane with process sandboxes (issue 26): the SDK's Cloud
examples 06 and 10 as their users run them, then what /api/v1 and the console (Chromium) show
of their conversations, which were made straight on the sandboxes' agent servers.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.compat.conftest import SCRIPTS, SdkRun
from tests.control_plane.console.test_console import new_user, signed_in
from tests.control_plane.support import ControlPlane, configure_llm, make_config
from tests.support.chromium import launched
from tests.support.llm import ScriptedLLM, call

pytestmark = [pytest.mark.e2e, pytest.mark.compat]

SECRET = "ghp_compat-secret-value-7391"


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    control_plane = ControlPlane(make_config(tmp_path / "cp")).start()
    yield control_plane
    control_plane.stop()


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    """On the test internet, as a model provider is: example 06's client gives its own LLM to a
    sandbox behind the network boundary, which reaches the internet, not this host."""
    server = ScriptedLLM().start_on_internet()
    yield server
    server.stop()


@pytest.fixture
def browser() -> Iterator[Browser]:
    with launched() as opened:
        yield opened


def test_cloud_workspace_examples_06_and_10(
    sdk_python: Path,
    plane: ControlPlane,
    llm: ScriptedLLM,
    key: str,
    tmp_path: Path,
    browser: Browser,
) -> None:
    account = new_user(plane, "cloud-user")
    client = plane.client(account)
    configure_llm(client, llm.base_url(key))
    assert client.patch("/api/v1/settings", json={"secrets": {"GITHUB_TOKEN": SECRET}}).is_success
    llm.script(
        key,
        call("terminal", command="echo 'fact one' > FACTS.txt", security_risk="LOW"),
        call("finish", message="facts written"),
        call(
            "terminal",
            command='echo "tail=${GITHUB_TOKEN: -4}" > SECRETS_CHECK.txt',
            security_risk="LOW",
        ),
        call("finish", message="checked"),
    )
    args = {
        "cloud_api_url": plane.url,
        "cloud_api_key": account,
        "host": plane.url,
        "api_key": "",
        "llm_base_url": llm.base_url(key),
        "secret_name": "GITHUB_TOKEN",
        "secret_tail": f"tail={SECRET[-4:]}",
    }
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        {
            "COMPAT_ARGS": json.dumps(args),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "OPENHANDS_SUPPRESS_BANNER": "1",
            "LOG_LEVEL": "WARNING",
        }
    )
    proc = subprocess.run(
        [str(sdk_python), str(SCRIPTS / "cloud_workspace.py")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("RESULT ")), None)
    assert line is not None, (
        f"no RESULT (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    run = SdkRun(json.loads(line[len("RESULT ") :]), proc.stdout, proc.stderr)
    run.assert_ok()

    # Both conversations were made straight on their sandboxes' agent servers, and /api/v1
    # shows them as the account's, with their events, model and metrics.
    for example in ("06", "10"):
        record = run[f"{example}_listed"]
        assert record["sandbox_id"] == run[f"{example}_sandbox"]
        assert record["llm_model"] == "openai/test-model" and record["trigger"] is None
        assert record["working_dir"] == "/workspace/project" and record["stored_events"] > 3
    assert SECRET not in proc.stdout + proc.stderr
    found = client.get("/api/v1/app-conversations/search").json()["items"]
    assert {c["id"] for c in found} == {run["06_conversation"], run["10_conversation"]}
    # Example 06 deleted its sandbox on the way out; example 10 kept its own.
    sandboxes = client.get(
        "/api/v1/sandboxes", params={"id": [run["06_sandbox"], run["10_sandbox"]]}
    ).json()
    assert [s["status"] for s in sandboxes] == ["MISSING", "RUNNING"]
    events = client.get(
        f"/api/v1/conversation/{run['10_conversation']}/events/search",
        params={"kind__eq": "ActionEvent"},
    ).json()["items"]
    assert [e["tool_name"] for e in events] == ["terminal", "finish"]
    assert SECRET not in json.dumps(events)
    # Example 10's conversation called the model through the gateway, which put the account's
    # key in: the scripted LLM got it, the sandbox only its token.
    keys = [h.get("authorization") for h in llm.headers_for(key)]
    assert "Bearer sk-test-key" in keys and all(k and "sbt_" not in k for k in keys), keys

    # The console lists both and shows example 10's run.
    page, problems = signed_in(browser, plane, account)
    for cid in (run["06_conversation"], run["10_conversation"]):
        expect(page.locator(f"tr[data-conversation-id='{cid}']")).to_be_visible()
    page.goto(f"{plane.url}/#/conversations/{run['10_conversation']}")
    terminal = page.locator(".event-action[data-tool='terminal']").first
    expect(terminal.locator(".call")).to_contain_text("SECRETS_CHECK.txt")
    expect(page.locator(".meta")).to_contain_text("Finished")
    assert SECRET not in page.content()
    page.context.close()
    assert problems == []
