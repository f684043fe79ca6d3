"""A failed model is recovered in place (issue 39 item 3), in a real Chromium against a real
control plane with a process sandbox, its gateway and the scripted LLM (litellm as it is): the
run fails on a wrong base URL, retrying while it does; the user fixes the base URL in Settings
and presses Retry on the conversation's error; the same conversation goes on and finishes, its
earlier events kept. Screenshots under `artifacts/console/retry/`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.control_plane.console_page import new_user, signed_in
from tests.control_plane.support import (
    ControlPlane,
    agent_sockets,
    configure_llm,
    conversation,
    make_config,
    start,
)
from tests.support.chromium import launched
from tests.support.llm import ScriptedLLM, text
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts" / "console" / "retry"
SLOW = 90_000  # ms: the agent server's retries of a failing call (some 20 s), a run
#: Nothing listens there: each call of the run fails at the gateway.
UNREACHABLE = "http://127.0.0.1:9/v1"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launched() as opened:
        yield opened


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    server = ControlPlane(make_config(tmp_path / "cp")).start()
    yield server
    server.stop()


def test_a_failed_model_is_retried_in_place_with_the_settings_fixed(
    plane: ControlPlane, llm: ScriptedLLM, key: str, browser: Browser
) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    api_key = new_user(plane, "erin")
    api = plane.client(api_key)
    configure_llm(api, UNREACHABLE, tools=["terminal"])
    task = start(api)  # idle
    cid, sid = task["app_conversation_id"], task["sandbox_id"]
    page, problems = signed_in(browser, plane, api_key)
    expect(page.get_by_role("heading", name="Conversations", exact=True)).to_be_visible()
    page.goto(f"{plane.url}/#/conversations/{cid}")
    wait_for(lambda: agent_sockets(api, sid) == 1, 30, what="the control plane's socket")

    # The model cannot be reached: while the agent server retries, the page says so.
    page.get_by_label("Message", exact=True).fill("Say hello")
    page.get_by_label("Message", exact=True).press("Enter")
    expect(page.locator(".progress-line")).to_contain_text(
        re.compile(
            r"The model call failed \(BadGatewayError\): retrying in \d+ s|Retrying the model"
        ),
        timeout=SLOW,
    )
    page.screenshot(path=str(ARTIFACTS / "01-retrying.png"), full_page=True)

    # Then the plain error, and on it the way out: Retry, and Settings.
    failure = page.locator(".event-error")
    expect(failure.locator(".plain-error")).to_contain_text(
        "The language model could not be reached", timeout=SLOW
    )
    retry = failure.get_by_role("button", name="Retry with the current settings")
    expect(retry).to_be_visible()
    expect(page.locator(".progress-line")).to_be_hidden()
    page.screenshot(path=str(ARTIFACTS / "02-failed.png"), full_page=True)

    # The user fixes the base URL in Settings, and comes back.
    failure.get_by_role("link", name="Change the model settings").click()
    expect(page.get_by_role("heading", name="Settings")).to_be_visible()
    page.get_by_label("Base URL", exact=True).fill(llm.base_url(key))
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#notice")).to_have_text("Settings saved.")
    page.go_back()
    expect(page).to_have_url(re.compile(f"#/conversations/{cid}$"))

    # Retry: the same conversation goes on and finishes; what came before stays.
    llm.script(key, text("Hello, at last"))
    retry = page.locator(".event-error").get_by_role(
        "button", name="Retry with the current settings"
    )
    retry.click()
    expect(page.locator(".event-message.from-agent .text")).to_have_text(
        "Hello, at last", timeout=SLOW
    )
    expect(retry).to_be_hidden()
    expect(page.locator(".event-message.from-user .text")).to_have_text(["Say hello"])
    expect(page.locator(".event-error .plain-error")).to_contain_text("could not be reached")
    expect(page.locator(".event-llm")).to_contain_text("The model is now openai/test-model")
    expect(page).to_have_url(re.compile(f"#/conversations/{cid}$"))
    page.screenshot(path=str(ARTIFACTS / "03-retried.png"), full_page=True)
    wait_for(lambda: conversation(api, cid)["execution_status"] == "finished", 60, what="the run")
    stored = api.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 100}).json()
    kinds = [e["kind"] for e in stored["items"]]
    assert kinds.index("ConversationErrorEvent") < len(kinds) - 1
    assert [e for e in stored["items"] if e["kind"] == "MessageEvent"][0]["source"] == "user"
    page.context.close()
    assert problems == []
