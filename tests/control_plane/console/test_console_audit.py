"""The console's accessibility audit: axe-core (the npm package of `tests/console-audit/`,
installed for the tests only by `make console-audit`, never served to users) run in Debian's
Chromium on the conversations list, a conversation and the settings. No serious or critical
violation may be found; every finding is kept as JSON next to the page's screenshot in the
test's tmp dir."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.control_plane.console_page import new_user, opened, watch
from tests.control_plane.support import (
    ControlPlane,
    configure_llm,
    make_config,
    start,
    whole_run,
)
from tests.support.chromium import launched
from tests.support.llm import ScriptedLLM, call
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

AXE = Path(__file__).resolve().parents[2] / "console-audit" / "node_modules" / "axe-core"
SLOW = 60_000  # ms

# Each violation: its rule, impact, help and (some of) the elements it was found on.
RUN_AXE = """async () => {
  const result = await axe.run(document, { resultTypes: ["violations"] });
  return result.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map((n) => ({ target: n.target.join(" "), html: n.html.slice(0, 200),
      summary: n.failureSummary })) }));
}"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launched() as opened_browser:
        yield opened_browser


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    server = ControlPlane(make_config(tmp_path / "cp")).start()
    yield server
    server.stop()


def audit(page: Page, name: str, into: Path) -> list[dict[str, Any]]:
    """axe's violations of the page as it is, its screenshot and findings kept in `into`."""
    page.add_script_tag(path=str(AXE / "axe.min.js"))
    found: list[dict[str, Any]] = page.evaluate(RUN_AXE)
    page.screenshot(path=str(into / f"{name}.png"), full_page=True)
    (into / f"{name}.json").write_text(json.dumps(found, indent=2))
    return [v for v in found if v["impact"] in ("serious", "critical")]


def test_no_serious_accessibility_violation(
    plane: ControlPlane, llm: ScriptedLLM, key: str, browser: Browser, tmp_path: Path
) -> None:
    if not (AXE / "axe.min.js").exists():
        pytest.fail(
            "axe-core is not installed: `make console-audit` (npm ci in tests/console-audit)"
        )
    api_key = new_user(plane, "ada")
    api = plane.client(api_key)
    configure_llm(api, llm.base_url(key), tools=["terminal", "file_editor"])
    # A conversation with a command, its output, a long output folded and the agent's answer.
    llm.script(
        key,
        call("terminal", command="echo hello"),
        call("terminal", command="seq 1 40"),
        call("finish", message="Done: I said hello."),
    )
    task = start(api, "Say hello")
    cid = task["app_conversation_id"]
    wait_for(lambda: whole_run(api, cid), 90, what="the run to end")

    # The console's CSP refuses the injected script: the context bypasses it (the audit's
    # script only; the pages are the console's own).
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(20_000)
    problems = watch(page)
    opened(page, plane)
    page.get_by_label("Account key").fill(api_key)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Conversations", exact=True)).to_be_visible()

    serious: dict[str, list[dict[str, Any]]] = {}
    expect(page.locator("tbody tr[data-conversation-id]")).to_have_count(1)
    serious["conversations"] = audit(page, "conversations", tmp_path)

    page.goto(f"{plane.url}/#/conversations/{cid}")
    expect(page.locator(".finish .text")).to_have_text("Done: I said hello.", timeout=SLOW)
    expect(page.locator(".meta")).to_contain_text("live")
    page.locator(".event-action", has_text="echo hello").get_by_text("Details").click()
    serious["conversation"] = audit(page, "conversation", tmp_path)

    page.get_by_role("link", name="Settings").click()
    expect(page.get_by_label("Model", exact=True)).to_have_value("openai/test-model")
    expect(page.locator("#llm-model-choice optgroup").first).to_have_attribute(
        "label", re.compile("Most used")
    )
    serious["settings"] = audit(page, "settings", tmp_path)

    context.close()
    assert problems == []
    assert serious == {"conversations": [], "conversation": [], "settings": []}, json.dumps(
        serious, indent=2
    )
