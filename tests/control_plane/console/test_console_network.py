"""The console's network boundary and LLM limits (issue 36) in a real Chromium against a real
control plane with process sandboxes: the default policy of new sandboxes and the limits in
Settings, a sandbox's policy in words, changed in place (its editor kept through the list's
refresh) and what it refused.

Screenshots of the settings' Network fieldset and of a sandbox card with its editor open are
left in the test's tmp_path, for review."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.control_plane import console_page
from tests.control_plane.console_page import new_user
from tests.control_plane.support import ControlPlane
from tests.support.chromium import launched
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

INTERNET = "Internet (not this host, private ranges or other sandboxes)"
SLOW = 30_000  # ms: an answer that changes or reads the host's firewall, on a loaded machine


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launched() as opened:
        yield opened


def signed_in(
    browser: Browser, plane: ControlPlane, name: str
) -> tuple[Page, httpx.Client, list[str]]:
    """A new user's page, signed in, the user's API client, and the page's problems."""
    api_key = new_user(plane, name)
    page, problems = console_page.signed_in(browser, plane, api_key)
    expect(page.get_by_role("heading", name="Conversations", exact=True)).to_be_visible()
    return page, plane.client(api_key), problems


def test_settings_network_and_llm_limits(
    control_plane: ControlPlane, browser: Browser, tmp_path: Path
) -> None:
    page, api, problems = signed_in(browser, control_plane, "erin")
    page.get_by_role("link", name="Settings").click()
    network = page.get_by_role("group", name="Network", exact=True)
    rules = network.get_by_label("Allowed hosts")
    expect(network.get_by_label("Internet", exact=True)).to_be_checked()
    expect(rules).to_be_hidden()

    # Allowlist with two rules: saved, and there after a reload.
    network.get_by_label("Only the hosts listed").check()
    expect(rules).to_be_visible()
    rules.fill("pypi.org:443\n*.github.com")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#notice")).to_have_text("Settings saved.")
    kept = {"mode": "allowlist", "allow": ["pypi.org:443", "*.github.com"]}
    assert api.get("/api/v1/settings").json()["network_policy"] == kept
    page.reload()
    expect(rules).to_have_value("pypi.org:443\n*.github.com")
    expect(network.get_by_label("Only the hosts listed")).to_be_checked()

    # A rule in a range no sandbox reaches: said under the field, naming it; nothing saved.
    rules.fill("pypi.org:443\n10.0.0.0/8")
    page.get_by_label("Daily budget (USD)").fill("7")
    page.get_by_role("button", name="Save").click()
    error = network.locator(".field-error").first
    expect(error).to_contain_text("'10.0.0.0/8' lies in a range no sandbox reaches")
    expect(rules).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#notice")).to_contain_text("Nothing was saved")
    settings = api.get("/api/v1/settings").json()
    assert settings["network_policy"] == kept and settings["llm_daily_budget_usd"] is None
    network.evaluate("fieldset => fieldset.scrollIntoView({ block: 'center' })")  # below the notice
    network.screenshot(path=str(tmp_path / "settings-network.png"))

    # Fixed, with a budget and a rate: kept; today's use shows them as the limits that hold.
    rules.fill("pypi.org:443")
    page.get_by_label("Daily budget (USD)").fill("2.5")
    page.get_by_label("Requests per minute").fill("30")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#notice")).to_have_text("Settings saved.")
    expect(network.locator(".field-error")).to_have_text(["", ""])
    settings = api.get("/api/v1/settings").json()
    assert settings["llm_daily_budget_usd"] == 2.5 and settings["llm_requests_per_minute"] == 30
    assert settings["network_policy"] == {"mode": "allowlist", "allow": ["pypi.org:443"]}
    page.reload()
    expect(page.get_by_label("Daily budget (USD)")).to_have_value("2.5")
    expect(page.get_by_label("Requests per minute")).to_have_value("30")
    usage = page.locator(".usage")
    expect(usage).to_contain_text("Today (UTC): 0 requests, 0 tokens (0 in, 0 out), $0.0000.")
    expect(usage).to_contain_text("$2.50 a day, 30 requests a minute")

    # Empty: no limit of the user's.
    page.get_by_label("Requests per minute").fill("")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#notice")).to_have_text("Settings saved.")
    assert api.get("/api/v1/settings").json()["llm_requests_per_minute"] is None
    expect(usage).to_contain_text("$2.50 a day.")
    page.get_by_role("group", name="LLM limits").screenshot(
        path=str(tmp_path / "settings-limits.png")
    )
    page.context.close()
    assert problems == []


def test_a_sandbox_network_changed_in_place(
    control_plane: ControlPlane, browser: Browser, tmp_path: Path
) -> None:
    page, api, problems = signed_in(browser, control_plane, "frank")
    created = api.post("/api/v1/sandboxes", json={})
    assert created.status_code == 201, created.text
    sid = created.json()["id"]

    def record() -> dict:
        return api.get("/api/v1/sandboxes", params={"id": sid}).json()[0]

    wait_for(lambda: record()["status"] == "RUNNING", 60, what="the sandbox to run")

    page.get_by_role("link", name="Sandboxes").click()
    card = page.locator(f"li[data-sandbox-id='{sid}']")
    expect(card.locator("h2")).to_contain_text("Running")
    expect(card.locator(".policy")).to_have_text(f"Network: {INTERNET}")
    expect(card).not_to_contain_text("null")
    editor = card.get_by_role("group", name="Network of this sandbox")
    expect(editor).to_be_hidden()

    # By keyboard: the button opens the editor on the policy's mode; an arrow key picks the next.
    button = card.get_by_role("button", name="Network", exact=True)
    button.focus()
    page.keyboard.press("Enter")
    expect(button).to_have_attribute("aria-expanded", "true")
    expect(editor.get_by_label("Internet", exact=True)).to_be_focused()
    page.keyboard.press("ArrowDown")
    expect(editor.get_by_label("Only the hosts listed")).to_be_checked()
    page.keyboard.press("Tab")
    rules = editor.get_by_label("Allowed hosts")
    expect(rules).to_be_focused()
    page.keyboard.type("pypi.org:443")

    # The list is read again every 5 s: two reads later the editor holds what was typed.
    for _ in range(2):
        with page.expect_response(lambda r: "/api/v1/sandboxes/search" in r.url, timeout=15_000):
            pass
    expect(rules).to_have_value("pypi.org:443")
    expect(rules).to_be_focused()
    expect(editor.get_by_label("Only the hosts listed")).to_be_checked()
    card.screenshot(path=str(tmp_path / "sandbox-card-editor.png"))

    # A refused rule is said in the editor, which stays open; the sandbox keeps its policy.
    rules.fill("10.0.0.0/8")
    card.get_by_role("button", name="Save").click()
    expect(editor.locator(".field-error").first).to_contain_text(
        "'10.0.0.0/8' lies in a range", timeout=SLOW
    )
    expect(card.get_by_text("Not saved: a rule was refused.")).to_be_visible()
    assert record()["network_policy"]["mode"] == "open"

    # None, saved: the card says so, and so does the API.
    rules.fill("pypi.org:443")
    editor.get_by_label("No network").check()
    card.get_by_role("button", name="Save").click()
    expect(card.locator(".policy")).to_have_text(
        "Network: No network beyond the control plane", timeout=SLOW
    )
    expect(editor).to_be_hidden()
    expect(button).to_be_focused()
    expect(page.locator("#notice")).to_contain_text("No network beyond the control plane")
    assert record()["network_policy"] == {"mode": "none", "allow": ["pypi.org:443"]}

    # Cancel leaves it as it was.
    button.click()
    expect(editor.get_by_label("No network")).to_be_checked()
    editor.get_by_label("Internet", exact=True).check()
    card.get_by_role("button", name="Cancel").click()
    expect(editor).to_be_hidden()
    assert record()["network_policy"]["mode"] == "none"

    # What its policy refused it: a count (none tried anything here), and the latest.
    card.get_by_role("button", name="What was refused").click()
    refusals = card.locator(".refusals")
    expect(refusals).to_contain_text(
        re.compile(r"\d+ connections? refused while it ran"), timeout=SLOW
    )
    state = api.get(f"/api/v1/sandboxes/{sid}/network").json()
    assert state["enforced"] is True and state["policy"]["mode"] == "none"
    card.get_by_role("button", name="Check again").click()
    expect(refusals.get_by_role("paragraph")).not_to_have_text("Reading…", timeout=SLOW)
    expect(refusals).to_contain_text("refused while it ran")
    page.context.close()
    assert problems == []
