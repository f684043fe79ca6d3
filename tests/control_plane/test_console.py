"""The web console in a real Chromium (Debian's, driven by Playwright; no browser is downloaded)
against a real control plane with process sandboxes and the scripted LLM.

Screenshots of each page are kept for review under `artifacts/console/` (gitignored)."""

from __future__ import annotations

import io
import signal
import threading
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from core import processes
from tests.control_plane.support import (
    ControlPlane,
    ShiftedClock,
    agent_sockets,
    bare_repository,
    configure_llm,
    conversation,
    git_daemon,
    make_config,
    sandbox_pid,
    start,
)
from tests.support.llm import Reply, ScriptedLLM, call, text
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "console"
SLOW = 60_000  # ms: a sandbox starts, a run finishes


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is absent: `make system-deps` installs Debian's chromium")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def clock() -> ShiftedClock:
    return ShiftedClock()


@pytest.fixture
def plane(tmp_path: Path, clock: ShiftedClock) -> Iterator[ControlPlane]:
    """Idle pause after 30 minutes (the default) of the clock the test may move on."""
    bare_repository(tmp_path / "forge", "acme/demo")
    with git_daemon(tmp_path / "forge") as forge:
        config = make_config(tmp_path / "cp", idle_seconds=1800, repository_url_template=forge)
        server = ControlPlane(config, clock).start()
        yield server
        server.stop()


class Shots:
    def __init__(self, name: str) -> None:
        self.dir = ARTIFACTS / name
        self.dir.mkdir(parents=True, exist_ok=True)

    def __call__(self, page: Page, name: str) -> None:
        page.screenshot(path=str(self.dir / f"{name}.png"), full_page=True)


def new_user(plane: ControlPlane, name: str) -> str:
    """In a thread of its own: Playwright's loop runs in this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(plane.new_user, name).result()


def watch(page: Page) -> list[str]:
    """Script errors and CSP violations of the page (a refused request is not one)."""
    problems: list[str] = []

    def console(message: ConsoleMessage) -> None:
        if message.type == "error" and "Failed to load resource" not in message.text:
            problems.append(message.text)
    page.on("console", console)
    page.on("pageerror", lambda error: problems.append(str(error)))
    return problems


def signed_in(browser: Browser, plane: ControlPlane, api_key: str) -> tuple[Page, list[str]]:
    """A new browser context's page, signed in with `api_key`, and its problems (`watch`)."""
    page = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
    page.set_default_timeout(20_000)
    problems = watch(page)
    page.goto(plane.url + "/")
    page.get_by_label("Account key").fill(api_key)
    page.get_by_role("button", name="Sign in").click()
    return page, problems


def test_the_console_end_to_end(plane: ControlPlane, clock: ShiftedClock, llm: ScriptedLLM,
                                key: str, browser: Browser) -> None:
    shot = Shots("walkthrough")
    api_key = new_user(plane, "alice")
    api = plane.client(api_key)
    context = browser.new_context(viewport={"width": 1200, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(20_000)
    problems = watch(page)

    # Sign in: a wrong key is refused; the right one is kept in this tab's session storage only.
    page.goto(plane.url + "/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    shot(page, "01-sign-in")
    page.get_by_label("Account key").fill("not-a-key")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("not known")
    page.get_by_label("Account key").fill(api_key)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Conversations", exact=True)).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('control-plane.api-key')") == api_key
    assert api_key not in page.url and context.cookies() == []

    # Settings, Application: the LLM (its key written, never shown), the git author, a strategy.
    page.get_by_role("link", name="Settings").click()
    page.get_by_label("Model", exact=True).fill("openai/test-model")
    page.get_by_label("Base URL", exact=True).fill(llm.base_url(key))
    page.get_by_label("API key", exact=True).fill("sk-test-key")
    page.get_by_label("Name", exact=True).fill("Alice")
    page.get_by_label("Email", exact=True).fill("alice@example.com")
    page.get_by_label("No grouping", exact=True).check()
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#notice")).to_have_text("Settings saved.")
    expect(page.get_by_text("A key is stored.")).to_be_visible()
    expect(page.get_by_label("API key", exact=True)).to_have_value("")
    settings = api.get("/api/v1/settings").json()
    assert settings["llm_model"] == "openai/test-model" and settings["llm_api_key"] == "**********"
    assert settings["git_user_name"] == "Alice" and settings["grouping_strategy"] == "NO_GROUPING"
    shot(page, "02-settings")

    # Start a conversation on a repository and watch its start task reach READY.
    llm.script(key, call("terminal", command="echo 'print(1)' > hello.py && echo more >> README.md"),
               call("finish", message="done"))
    page.get_by_role("link", name="Conversations").click()
    page.get_by_label("Message", exact=True).fill("Write hello.py")
    page.get_by_label("Repository", exact=True).fill("acme/demo")
    page.get_by_label("Branch", exact=True).fill("main")
    page.get_by_role("button", name="Start conversation").click()
    status = page.locator(".start-status")
    expect(status).to_contain_text("READY", timeout=SLOW)
    expect(page.locator(".progress li").last).to_have_text("READY")
    link = status.get_by_role("link", name="open the conversation")
    cid = (link.get_attribute("href") or "").rsplit("/", 1)[-1]
    sid = api.get("/api/v1/app-conversations", params={"ids": cid}).json()[0]["sandbox_id"]
    expect(page.locator(f"tr[data-conversation-id='{cid}']")).to_contain_text("acme/demo @ main")
    shot(page, "03-conversations-started")

    # The conversation: its tool call with its result, as the run goes.
    link.click()
    terminal = page.locator(".event-action[data-tool='terminal']").first
    expect(terminal.locator(".call")).to_contain_text("hello.py", timeout=SLOW)
    expect(terminal.locator(".result")).to_be_visible(timeout=SLOW)
    expect(page.locator(".meta")).to_contain_text("FINISHED", timeout=SLOW)
    expect(page.locator(".meta")).to_contain_text("live")

    # The page never holds a sandbox's key or address (it reaches sandboxes through /api/v1).
    session_key = api.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["session_api_key"]
    assert session_key and session_key not in page.content()
    for path in ("/sandboxes/search", f"/app-conversations?ids={cid}", "/app-conversations/search"):
        seen = page.evaluate("""async (path) => (await fetch('/api/v1' + path, {headers: {
            Authorization: 'Bearer ' + sessionStorage.getItem('control-plane.api-key')}})).text()""",
                             path)
        assert cid in seen or sid in seen
        assert session_key not in seen and "AGENT_SERVER" not in seen, path

    # Git changes and a file's diff.
    page.get_by_role("button", name="Show Git changes").click()
    changes = page.get_by_role("list", name="Changed files")
    expect(changes).to_contain_text("hello.py")
    changes.get_by_role("button", name="README.md").click()
    expect(page.locator(".diff .add")).to_have_text("+ more")
    expect(page.locator(".diff .same").first).to_have_text("  # demo")
    shot(page, "04-conversation-diff")

    # A follow-up, its tool call appearing live; what the agent prints is shown as text.
    llm.script(key, call("terminal", command="echo '<img src=x onerror=window.__xss=2>' && sleep 1"),
               text("<script>window.__xss=1</script><img src=x onerror=\"window.__xss=3\"> done"))
    page.get_by_label("Message", exact=True).fill("Print some markup")
    page.get_by_role("button", name="Send").click()
    expect(page.locator(".event-message.from-user .text").last).to_have_text("Print some markup")
    expect(page.locator(".event-action .output", has_text="<img src=x onerror=window.__xss=2>")
           ).to_be_visible(timeout=SLOW)
    expect(page.locator(".event-message.from-agent .text").last).to_have_text(
        "<script>window.__xss=1</script><img src=x onerror=\"window.__xss=3\"> done", timeout=SLOW)
    assert page.evaluate("window.__xss") is None
    assert page.locator("main img, main script").count() == 0
    shot(page, "05-conversation-markup-as-text")

    # Confirmation: every action waits; approving it runs it.
    page.get_by_label("Ask before each action").check()
    expect(page.locator("#notice")).to_contain_text("Every action now waits")
    llm.script(key, call("terminal", command="echo approved > approved.txt"),
               call("finish", message="approved it"))
    page.get_by_label("Message", exact=True).fill("Write approved.txt")
    page.get_by_role("button", name="Send").click()
    approve = page.get_by_role("button", name="Approve")
    expect(approve).to_be_visible(timeout=SLOW)
    expect(page.locator(".event-action.waiting .call")).to_contain_text("approved.txt")
    assert api.get(f"/api/v1/app-conversations/{cid}/file", params={"path": "approved.txt"}).status_code == 404
    shot(page, "06-conversation-confirmation")
    approve.click()
    expect(approve).to_be_hidden()
    expect(page.locator(".event-action", has_text="approved.txt").locator(".result")).to_be_visible(timeout=SLOW)
    expect(page.locator(".meta")).to_contain_text("FINISHED", timeout=SLOW)
    assert api.get(f"/api/v1/app-conversations/{cid}/file",
                   params={"path": "approved.txt"}).text == "approved\n"
    page.get_by_label("Ask before each action").uncheck()
    expect(page.locator("#notice")).to_contain_text("without approval")

    # Pause: taken between steps, so the next call never runs.
    llm.script(key, call("terminal", command="sleep 3"), call("terminal", command="echo never-runs"))
    page.get_by_label("Message", exact=True).fill("Sleep a while")
    page.get_by_role("button", name="Send").click()
    expect(page.locator(".event-action .call", has_text="sleep 3")).to_be_visible(timeout=SLOW)
    page.get_by_role("button", name="Pause").click()
    expect(page.locator(".events")).to_contain_text("Paused by the user")
    expect(page.locator(".meta")).to_contain_text("PAUSED", timeout=SLOW)
    expect(page.locator(".events")).not_to_contain_text("never-runs")
    shot(page, "07-conversation-paused")
    with llm._lock:
        llm.scripts[key].clear()

    # The trajectory downloads as the zip of the control plane's store.
    with page.expect_download() as pending:
        page.get_by_role("button", name="Download trajectory").click()
    download = pending.value
    assert download.suggested_filename == f"conversation-{cid}.zip"
    with zipfile.ZipFile(io.BytesIO(Path(download.path()).read_bytes())) as archive:
        assert b"approved.txt" in archive.read("events.jsonl")

    # Grouping: "Add to any" places the next conversation in the sandbox there is.
    page.get_by_role("link", name="Settings").click()
    page.get_by_label("Add to any", exact=True).check()
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#notice")).to_have_text("Settings saved.")
    assert api.get("/api/v1/settings").json()["grouping_strategy"] == "ADD_TO_ANY"
    llm.script(key, call("finish", message="second"))
    page.get_by_role("link", name="Conversations").click()
    page.get_by_label("Message", exact=True).fill("A second one")
    page.get_by_role("button", name="Start conversation").click()
    expect(status).to_contain_text(f"READY: open the conversation (sandbox {sid})", timeout=SLOW)
    rows = page.locator("tbody tr")
    expect(rows).to_have_count(2)
    expect(page.get_by_text("2 conversations", exact=True)).to_be_visible()
    expect(page.locator(f"tr[data-sandbox-id='{sid}']")).to_have_count(2)
    shot(page, "08-conversations-grouped")

    # Sandboxes: two conversations in one; pause, resume, delete after typing its id. Each
    # card says why its sandbox is in its status.
    page.get_by_role("link", name="Sandboxes").click()
    card = page.locator(f"li[data-sandbox-id='{sid}']")
    expect(card).to_contain_text("Conversations2")
    expect(card.locator(".meta")).not_to_contain_text("Pauses when idle at—")
    card.get_by_role("button", name="Pause").click()
    expect(card.locator("h2")).to_contain_text("PAUSED")
    expect(card.locator(".why-line")).to_have_text("Paused: you paused it")
    expect(card).not_to_contain_text("Deleted at—")
    shot(page, "09-sandboxes-paused")
    card.get_by_role("button", name="Resume").click()
    expect(card.locator("h2")).to_contain_text("RUNNING")
    expect(card.locator(".why-line")).to_have_text("Running: you resumed it")
    card.get_by_label(f"Type the sandbox id ({sid}) to delete it").fill("some-other-id")
    card.get_by_role("button", name="Delete sandbox").click()
    expect(page.locator("#notice")).to_contain_text("nothing was deleted")
    assert api.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["status"] == "RUNNING"

    # Half an hour without activity: the reconciler pauses it, and the card says so.
    clock.offset = 1800
    wait_for(lambda: api.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["status"] == "PAUSED",
             30, what="the idle pause")
    page.reload()
    expect(card.locator(".why-line")).to_have_text("Paused: idle for 30 min")
    shot(page, "10-sandboxes-idle")
    card.get_by_label(f"Type the sandbox id ({sid}) to delete it").fill(sid)
    card.get_by_role("button", name="Delete sandbox").click()
    expect(card.locator("h2")).to_contain_text("MISSING")
    expect(card.locator(".why-line")).to_have_text("Missing: you deleted it")
    shot(page, "11-sandboxes-deleted")

    # Its conversations are read-only now, saying why; the transcript stays, with each change
    # of the sandbox's status in it where it happened.
    page.goto(f"{plane.url}/#/conversations/{cid}")
    expect(page.get_by_role("alert")).to_contain_text(
        "Read-only: the sandbox is MISSING (you deleted it)")
    expect(page.locator(".meta")).to_contain_text("MISSING you deleted it")
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    expect(page.get_by_role("button", name="Pause")).to_be_disabled()
    expect(page.locator(".event-action .call", has_text="approved.txt")).to_be_visible()
    expect(page.locator(".event-sandbox .text")).to_have_text([
        "Paused: you paused it", "Running: you resumed it", "Paused: idle for 30 min",
        "Missing: you deleted it"])
    page.locator(".event-sandbox").nth(2).scroll_into_view_if_needed()
    shot(page, "12-conversation-read-only")
    assert conversation(api, cid)["sandbox_status"] == "MISSING"

    # At phone width nothing runs off the side.
    page.set_viewport_size({"width": 390, "height": 844})
    page.get_by_role("link", name="Conversations").click()
    expect(page.locator("tbody tr")).to_have_count(2)
    shot(page, "13-conversations-phone")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.goto(f"{plane.url}/#/conversations/{cid}")
    expect(page.locator(".event-action").first).to_be_visible()
    shot(page, "14-conversation-phone")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert page.evaluate("sessionStorage.length") == 0
    context.close()
    assert problems == []


def test_streaming_text_shows_as_it_is_written(plane: ControlPlane, llm: ScriptedLLM, key: str,
                                               browser: Browser) -> None:
    shot = Shots("streaming")
    api_key = new_user(plane, "bob")
    api = plane.client(api_key)
    configure_llm(api, llm.base_url(key), tools=["terminal"])
    page, problems = signed_in(browser, plane, api_key)

    # The setting: off by default, turned on and saved.
    page.get_by_role("link", name="Settings").click()
    streaming = page.get_by_label("Show the model's text as it is written")
    expect(streaming).not_to_be_checked()
    streaming.check()
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#notice")).to_have_text("Settings saved.")
    assert api.get("/api/v1/settings").json()["llm_stream"] is True

    task = start(api)  # idle
    cid, sid = task["app_conversation_id"], task["sandbox_id"]
    page.goto(f"{plane.url}/#/conversations/{cid}")
    expect(page.locator(".meta")).to_contain_text("live")
    # The page follows the conversation: the control plane holds the sandbox's socket for it.
    wait_for(lambda: agent_sockets(api, sid) == 1, 30, what="the control plane's socket")

    # The model is held part-way through its answer: what it has written so far is on the page.
    # Markup in it is characters, from the first piece on.
    answer = "Streamed: <b>bold</b> <img src=x onerror=window.__x=1> as text, then the rest."
    gate = threading.Event()
    llm.script(key, Reply(text=answer, hold=gate, hold_after=56))  # 7 pieces of 8
    page.get_by_label("Message", exact=True).fill("Tell me slowly")
    page.get_by_role("button", name="Send").click()
    draft = page.locator(".event-streaming")
    # A new sandbox's first model call takes seconds on a loaded machine.
    expect(draft.locator(".text:not(.thought)")).to_have_text(answer[:56], timeout=SLOW)
    expect(page.locator(".event-message.from-agent")).to_have_count(0)
    assert page.locator("main b, main img").count() == 0 and page.evaluate("window.__x") is None
    shot(page, "01-streaming")
    gate.set()
    # The final message replaces the streamed text.
    expect(page.locator(".event-message.from-agent .text")).to_have_text(answer, timeout=SLOW)
    expect(draft).to_have_count(0)
    assert page.locator("main b, main img").count() == 0 and page.evaluate("window.__x") is None
    shot(page, "02-final-message")
    assert conversation(api, cid)["execution_status"] in ("running", "finished")
    page.context.close()
    wait_for(lambda: agent_sockets(api, sid) == 0, 30, what="the socket to close")
    assert problems == []

    # The sandbox's process vanishes while the conversation is open: the page says so, and why.
    page, problems = signed_in(browser, plane, api_key)
    expect(page.get_by_role("heading", name="Conversations", exact=True)).to_be_visible()
    page.goto(f"{plane.url}/#/conversations/{cid}")
    expect(page.locator(".meta")).to_contain_text("live")
    processes.signal_group(sandbox_pid(plane, sid), signal.SIGKILL)
    expect(page.locator(".event-sandbox .text")).to_have_text(
        ["Missing: the sandbox's process vanished"], timeout=SLOW)
    expect(page.get_by_role("alert")).to_contain_text(
        "Read-only: the sandbox is MISSING (the sandbox's process vanished)")
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    shot(page, "03-sandbox-vanished")
    page.context.close()
    assert problems == []
