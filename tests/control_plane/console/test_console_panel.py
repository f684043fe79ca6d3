"""The workspace panel beside the chat, in a real Chromium against a real control plane, process
sandboxes and the scripted LLM: the terminal live (a line of a command shows before the command
ends), the files of the whole sandbox, and the web app the agent serves on a port, in the panel
and in a new tab, unable to reach the console's key. Screenshots go to the test's tmp dir."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.control_plane.console_page import new_user, signed_in
from tests.control_plane.support import ControlPlane, configure_llm, make_config, start
from tests.support.chromium import launched
from tests.support.llm import ScriptedLLM, call

pytestmark = pytest.mark.e2e

SLOW = 60_000  # ms: a sandbox starts, a run goes on
PORT = 8011
INDEX = (
    "<!doctype html><title>Agent app</title><h1>Hello from the agent's app</h1>"
    '<p id="js">its script did not run</p><script src="app.js"></script>\n'
)
# The app's script: it runs (served from the app's own path), and tries to read the console's
# key from its parent and its own storage, as a hostile app would.
SCRIPT = (
    "let key = 'unreadable';\n"
    "try { key = String(window.parent.sessionStorage.getItem('control-plane.api-key')); }"
    " catch (e) {}\n"
    "try { key = key === 'unreadable' ? String(sessionStorage.getItem('control-plane.api-key'))"
    " : key; } catch (e) {}\n"
    "document.getElementById('js').textContent = 'its script ran; the console key: ' + key;\n"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launched() as opened:
        yield opened


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    server = ControlPlane(make_config(tmp_path / "cp")).start()
    yield server
    server.stop()


def test_the_panel_streams_the_terminal_and_opens_the_agents_app(
    plane: ControlPlane, llm: ScriptedLLM, key: str, browser: Browser, tmp_path: Path
) -> None:
    api_key = new_user(plane, "ada")
    api = plane.client(api_key)
    configure_llm(api, llm.base_url(key), tools=["terminal"])
    serve = (
        f"printf '%s' {shlex.quote(INDEX)} > index.html && "
        f"printf '%s' {shlex.quote(SCRIPT)} > app.js && "
        f"(python3 -m http.server {PORT} > /dev/null 2>&1 &)"
    )
    # A line, then a wait on a file the test creates: the line must show before the end.
    held = "echo first-line && while [ ! -e release.flag ]; do sleep 0.1; done && echo last-line"
    llm.script(
        key,
        call("terminal", command=serve),
        call("terminal", command=held),
        call("finish", message="The app is served on port 8011."),
    )
    task = start(api, "Serve an app and wait")
    assert task["status"] == "READY", task
    cid, sid = task["app_conversation_id"], task["sandbox_id"]

    page, problems = signed_in(browser, plane, api_key)
    page.set_viewport_size({"width": 1400, "height": 900})
    expect(page.get_by_role("heading", name="Conversations", exact=True)).to_be_visible()
    page.goto(f"{plane.url}/#/conversations/{cid}")
    panel = page.locator("aside.workspace")
    expect(panel.get_by_role("tab")).to_have_text(
        ["Changes", "Files", "Terminal", "Browser", "App"]
    )
    # Beside the chat, not above it.
    chat_box = page.locator(".chat").bounding_box()
    panel_box = panel.bounding_box()
    assert chat_box and panel_box and panel_box["x"] >= chat_box["x"] + chat_box["width"] - 1

    # The terminal, live: the held command's first line is there while it still runs.
    panel.get_by_role("tab", name="Terminal").click()
    terminal = panel.get_by_role("list", name="Terminal")
    held_entry = terminal.locator("li", has_text="while [ ! -e release.flag ]")
    expect(held_entry.locator(".term-output")).to_have_text("first-line", timeout=SLOW)
    expect(held_entry.locator(".exit")).to_have_text("running…")
    expect(terminal.locator("li", has_text="http.server").locator(".exit")).to_have_text("exit 0")
    page.screenshot(path=str(tmp_path / "01-terminal-live.png"))
    record = api.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
    released = httpx.post(
        record["exposed_urls"][0]["url"] + f"/api/conversations/{cid}/file",
        params={"path": "release.flag"},
        content=b"",
        headers={"X-Session-API-Key": record["session_api_key"]},
        timeout=30,
    )
    assert released.status_code == 200, released.text
    expect(held_entry.locator(".term-output")).to_contain_text("last-line", timeout=SLOW)
    expect(held_entry.locator(".exit")).to_have_text("exit 0", timeout=SLOW)
    expect(page.locator(".finish .text")).to_have_text(
        "The app is served on port 8011.", timeout=SLOW
    )
    # In the order they ran, though the held command's live output came before the replay.
    expect(terminal.locator("li .command").first).to_contain_text("http.server")
    page.screenshot(path=str(tmp_path / "02-terminal-done.png"))

    # Files: the sandbox's whole workspace, opened at this conversation's directory.
    panel.get_by_role("tab", name="Files").click()
    files = panel.get_by_role("list", name="Files")
    expect(files).to_contain_text("index.html")
    files.get_by_role("button", name="index.html").click()
    expect(panel.locator(".file-text")).to_contain_text("Hello from the agent's app")
    files.get_by_role("button", name="..").click()
    expect(panel.locator(".tab-body")).to_contain_text("Files in / (the sandbox's workspace)")
    page.screenshot(path=str(tmp_path / "03-files.png"))

    # The app the agent serves: in the panel, its script run but the console's key out of reach.
    panel.get_by_role("tab", name="App").click()
    expect(panel.get_by_label("Port the agent's app listens on")).to_have_value(str(PORT))
    panel.get_by_role("button", name="Open", exact=True).click()
    frame = page.frame_locator("iframe.app-frame")
    expect(frame.locator("h1")).to_have_text("Hello from the agent's app", timeout=SLOW)
    expect(frame.locator("#js")).to_have_text("its script ran; the console key: unreadable")
    src = panel.locator("iframe.app-frame").get_attribute("src") or ""
    assert re.fullmatch(rf"/sandbox-apps/{sid}/{PORT}/[0-9]+\.[A-Za-z0-9_-]{{43}}/", src), src
    page.screenshot(path=str(tmp_path / "04-app-in-panel.png"))
    # … and in a new tab of its own.
    with page.context.expect_page() as opened:
        panel.get_by_role("link", name=f"Open the app on port {PORT} in a new tab").click()
    tab = opened.value
    expect(tab.locator("h1")).to_have_text("Hello from the agent's app", timeout=SLOW)
    expect(tab.locator("#js")).to_have_text("its script ran; the console key: unreadable")
    assert tab.url == plane.url + src
    tab.screenshot(path=str(tmp_path / "05-app-in-a-tab.png"))
    tab.close()
    # The page never put the key in a URL or a cookie; the app's link needed neither.
    assert page.context.cookies() == [] and api_key not in src
    page.context.close()
    assert problems == [], problems
