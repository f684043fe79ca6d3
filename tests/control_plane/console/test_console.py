"""The web console in a real Chromium (Debian's, driven by Playwright; no browser is downloaded)
against a real control plane with process sandboxes and the scripted LLM.

Screenshots of each page are kept for review under `artifacts/console/` (gitignored)."""

from __future__ import annotations

import io
import json
import re
import signal
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from core import processes
from tests.control_plane.console_page import new_user, opened, signed_in, watch
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
from tests.support.chromium import launched
from tests.support.demo import demo_reply
from tests.support.llm import Reply, ScriptedLLM, call, error, text
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts" / "console"
SLOW = 60_000  # ms: a sandbox starts, a run finishes


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launched() as opened:
        yield opened


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


# The wire's status names, none of which a person should read on a page (in its visible text:
# the raw events folded away are not).
RAW_STATUS = re.compile(
    r"\b(STARTING|RUNNING|PAUSED|ERROR|MISSING|IDLE|FINISHED|STUCK|WAITING_FOR_CONFIRMATION"
    r"|waiting_for_confirmation)\b"
)


def assert_no_raw_status(page: Page) -> None:
    shown = page.locator("main").inner_text()
    assert not RAW_STATUS.search(shown), RAW_STATUS.findall(shown)


def commands_in(plane: ControlPlane, sandbox_id: str) -> list[str]:
    """The command lines of the sandbox's processes (its leader's descendants), space-joined."""
    children: dict[int, list[int]] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            ppid = int(
                next(x for x in status.read_text().splitlines() if x.startswith("PPid:"))[5:]
            )
        except (OSError, StopIteration, ValueError):
            continue
        children.setdefault(ppid, []).append(int(status.parent.name))
    found: list[str] = []
    todo = [sandbox_pid(plane, sandbox_id)]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        found.append(b" ".join(a for a in argv if a).decode(errors="replace"))
    return found


class Shots:
    def __init__(self, name: str) -> None:
        self.dir = ARTIFACTS / name
        self.dir.mkdir(parents=True, exist_ok=True)

    def __call__(self, page: Page, name: str) -> None:
        page.screenshot(path=str(self.dir / f"{name}.png"), full_page=True)


def scripted_after_pwd(
    steps: Callable[[str], list[Reply]],
) -> Callable[[str, dict[str, Any]], Reply]:
    """Replies made once the run's `pwd` answered: `steps(working directory)`, one a request."""
    made: list[Reply] = []

    def respond(_key: str, body: dict[str, Any]) -> Reply:
        if not made:
            tool = next(m for m in body["messages"] if m.get("role") == "tool")
            content = tool["content"]
            said = (
                content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
            )
            made.extend(steps(said.strip().splitlines()[0]))
        return made.pop(0)

    return respond


@pytest.fixture
def titles(llm: ScriptedLLM) -> Iterator[None]:
    """The model's answer to the title prompt, "Titled: <the request's first line>", outside the
    scripts (a title is asked while the agent's own calls take their scripted replies)."""

    def title(_key: str, body: dict[str, Any]) -> Reply | None:
        said = json.dumps(body.get("messages"))
        if "for a conversation that starts with" not in said:
            return None
        request = body["messages"][-1]["content"]
        text_ = request if isinstance(request, str) else "".join(p.get("text", "") for p in request)
        return text("Titled: " + text_.split("\n\n", 1)[1].splitlines()[0])

    llm.interceptor = title
    yield
    llm.interceptor = None


@pytest.mark.usefixtures("titles")
def test_the_console_end_to_end(
    plane: ControlPlane, clock: ShiftedClock, llm: ScriptedLLM, key: str, browser: Browser
) -> None:
    shot = Shots("walkthrough")
    api_key = new_user(plane, "alice")
    api = plane.client(api_key)
    context = browser.new_context(viewport={"width": 1200, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(20_000)
    problems = watch(page)

    # Sign in: a wrong key is refused; the right one is kept in this tab's session storage only.
    opened(page, plane)
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

    # The model field suggests the models litellm knows.
    expect(page.locator("#llm-models option[value='gpt-4o']")).to_have_count(1)
    expect(page.locator("#llm-models option[value='anthropic/claude-sonnet-4-5']")).to_have_count(1)
    # The picker: grouped by provider, the most used first.
    picker = page.get_by_label("Models by provider")
    groups = picker.locator("optgroup")
    assert groups.count() > 10
    labels = [groups.nth(i).get_attribute("label") for i in range(3)]
    assert labels == ["Most used", "OpenAI", "Anthropic"], labels
    most_used = groups.first.locator("option")
    expect(most_used.first).to_have_attribute("value", "anthropic/claude-sonnet-4-5")
    assert 5 <= most_used.count() <= 20
    expect(groups.nth(1).locator("option[value='gpt-4o']")).to_have_count(1)
    expect(groups.nth(1).locator("option[value^='anthropic/']")).to_have_count(0)
    expect(picker.locator("optgroup[label='Anthropic'] option").first).to_have_attribute(
        "value", re.compile("^anthropic/")
    )
    # "Test connection": a base URL where nothing answers is said in words; the stored one works.
    base_url = page.get_by_label("Base URL", exact=True)
    base_url.fill("http://127.0.0.1:9/v1")
    page.get_by_role("button", name="Test connection").click()
    result = page.locator(".test-result")
    expect(result).to_contain_text(
        "could not be reached: nothing answered at its base URL", timeout=SLOW
    )
    expect(result).to_have_class(re.compile("error"))
    shot(page, "02-settings-test-failed")
    base_url.fill(llm.base_url(key))
    llm.script(key, text("OK"))
    page.get_by_role("button", name="Test connection").click()
    expect(result).to_have_text("Connected: openai/test-model answered.", timeout=SLOW)
    # Secrets: names listed, values write-only.
    page.get_by_label("Secret name").fill("DEMO_TOKEN")
    page.get_by_label("Secret value").fill("s3cret-value-123")
    page.get_by_role("button", name="Add secret").click()
    expect(page.get_by_role("list", name="Stored secrets")).to_contain_text("DEMO_TOKEN")
    expect(page.get_by_label("Secret value")).to_have_value("")
    assert "s3cret-value-123" not in page.content()
    assert api.get("/api/v1/settings").json()["secret_names"] == ["DEMO_TOKEN"]
    shot(page, "02-settings")

    # Start a conversation: the page goes straight to it, its stages on one progress line; its
    # title is its first message at once, then the model's.
    # The file editor takes absolute paths: the run's first command says where it works.
    llm.script(key, call("terminal", command="pwd"))

    def steps(workdir: str) -> list[Reply]:
        return [
            call(
                "file_editor",
                command="create",
                path=f"{workdir}/hello.py",
                file_text="print(1)\nprint(2)\n",
            ),
            call(
                "file_editor",
                command="str_replace",
                path=f"{workdir}/hello.py",
                old_str="print(2)",
                new_str="print('hello')",
            ),
            call(
                "terminal", command="echo more >> README.md && python3 -c 'import sys; sys.exit(1)'"
            ),
            call("think", thought="The script exits with 1 on purpose; all good."),
            call("finish", message="I wrote hello.py."),
        ]

    llm.responder = scripted_after_pwd(steps)
    page.get_by_role("link", name="Conversations").click()
    start_form = page.locator("form.start")
    form_box = start_form.bounding_box()
    assert form_box is not None and form_box["height"] < 300  # the list stays in view
    page.get_by_label("Message", exact=True).fill("Write hello.py\nwith a greeting")
    page.locator("summary", has_text="Repository and sandbox").click()
    page.get_by_label("Repository", exact=True).fill("acme/demo")
    page.get_by_label("Branch", exact=True).fill("main")
    page.get_by_role("button", name="Start conversation").click()
    expect(page.get_by_role("heading", name="Starting a conversation")).to_be_visible()
    expect(page.locator(".event-message.from-user .text")).to_have_text(
        "Write hello.py\nwith a greeting"
    )
    expect(page.locator(".start-line")).to_contain_text(re.compile(r"\d+ s"))
    shot(page, "03-starting")
    expect(page).to_have_url(re.compile(r"#/conversations/[0-9a-f-]{36}$"), timeout=SLOW)
    cid = page.url.rsplit("/", 1)[-1]
    sid = api.get("/api/v1/app-conversations", params={"ids": cid}).json()[0]["sandbox_id"]
    title = page.locator(".title-text")
    expect(title).to_have_text("Titled: Write hello.py", timeout=SLOW)
    assert conversation(api, cid)["title"] == "Titled: Write hello.py"

    # The transcript as a person reads it: a created file with its preview, an edit as a
    # diff, a failed command with its exit status (without the working-directory trailer),
    # a thought as prose, the finish message as the agent's answer; the raw event a click away.
    created = page.locator(".event-action[aria-label^='Created '][aria-label$='hello.py']")
    expect(created.locator(".preview")).to_have_text("print(1)\nprint(2)", timeout=SLOW)
    edited = page.locator(".event-action[aria-label^='Edited '][aria-label$='hello.py'] > pre.diff")
    expect(edited.locator(".del")).to_have_text("- print(2)", timeout=SLOW)
    expect(edited.locator(".add")).to_have_text("+ print('hello')")
    command = page.locator(".event-action[data-tool='terminal']", has_text="echo more")
    expect(command.locator(".call")).to_contain_text("echo more >> README.md", timeout=SLOW)
    expect(command.locator(".result")).to_contain_text("Failed exit 1", timeout=SLOW)
    expect(command.locator(".result.failed")).to_have_count(1)
    expect(command.locator(".result .output")).not_to_contain_text("Current working directory")
    expect(page.locator(".event-action[aria-label='Thought'] .prose")).to_have_text(
        "The script exits with 1 on purpose; all good.", timeout=SLOW
    )
    answer = page.locator(".event-message.from-agent.finish")
    expect(answer.locator(".text")).to_have_text("I wrote hello.py.", timeout=SLOW)
    # A chat: the newest is in view, the message box pinned at the bottom of the window.
    wait_for(
        lambda: page.evaluate(
            "window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 90"
        ),
        10,
        what="the page to follow the newest event",
    )
    box = page.get_by_label("Message", exact=True).bounding_box()
    assert box is not None and box["y"] + box["height"] <= 900
    command.locator("summary", has_text="Details").click()
    expect(command.locator("details.raw pre").first).to_contain_text('"kind": "TerminalAction"')
    expect(command.locator("details.raw pre").first).to_be_visible()
    expect(command.locator("details.raw pre").last).to_contain_text('"kind": "TerminalObservation"')
    expect(page.locator(".meta")).to_contain_text("Finished", timeout=SLOW)
    expect(page.locator(".meta")).to_contain_text("live")
    # No log residue: one fold ("Details") per card at most, no "State: …" rows between turns,
    # times relative with the moment in full as their title, statuses in words.
    assert (
        page.evaluate(
            "[...document.querySelectorAll('.events > li')]"
            ".filter((li) => li.querySelectorAll('details').length > 1).length"
        )
        == 0
    )
    assert page.locator(".events > li details").count() >= 5
    expect(page.locator(".events")).not_to_contain_text("State:")
    stamp = page.locator(".events time.stamp").first
    expect(stamp).to_have_text(re.compile(r"^(just now|\d+ s ago|\d+ min ago)$"))
    assert re.search(r"\d{1,2}:\d{2}:\d{2}", stamp.get_attribute("title") or "")
    assert_no_raw_status(page)
    shot(page, "04-transcript")

    llm.responder = None

    # Rename in place.
    page.get_by_role("button", name="Rename").click()
    page.get_by_label("Title", exact=True).fill("Hello script")
    page.get_by_label("Title", exact=True).press("Enter")
    expect(title).to_have_text("Hello script")
    assert conversation(api, cid)["title"] == "Hello script"

    # The page never holds a sandbox's key or address (it reaches sandboxes through /api/v1).
    session_key = api.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["session_api_key"]
    assert session_key and session_key not in page.content()
    for path in ("/sandboxes/search", f"/app-conversations?ids={cid}", "/app-conversations/search"):
        seen = page.evaluate(
            """async (path) => (await fetch('/api/v1' + path, {headers: {
            Authorization: 'Bearer ' + sessionStorage.getItem('control-plane.api-key')}}))
            .text()""",
            path,
        )
        assert cid in seen or sid in seen
        assert session_key not in seen and "AGENT_SERVER" not in seen, path

    # The workspace, a panel beside the chat: files to read and download, the changes of this
    # run (from its edits, Git or not), the Git changes with a file's diff, the terminal.
    panel = page.locator("aside.workspace")
    panel.get_by_role("tab", name="Files").click()
    files = page.get_by_role("list", name="Files")
    expect(files).to_contain_text("hello.py")
    files.get_by_role("button", name="hello.py").click()
    expect(page.locator(".file-text")).to_have_text("print(1)\nprint('hello')\n")
    with page.expect_download() as pending_file:
        page.get_by_role("button", name="Download hello.py").click()
    assert pending_file.value.suggested_filename == "hello.py"
    assert Path(pending_file.value.path()).read_text() == "print(1)\nprint('hello')\n"
    panel.get_by_role("tab", name="Changes").click()
    run_changes = page.get_by_role("list", name="Changes of this run")
    expect(run_changes).to_contain_text("hello.py")
    run_changes.get_by_role("button", name="hello.py").click()
    expect(page.locator(".viewer .diff .add")).to_have_text(["+ print(1)", "+ print('hello')"])
    panel.get_by_role("tab", name="Terminal").click()
    expect(panel.get_by_role("list", name="Terminal")).to_contain_text("exit 1")
    panel.get_by_role("tab", name="Changes").click()
    page.get_by_role("button", name="Show Git changes").click()
    changes = page.get_by_role("list", name="Changed files")
    expect(changes).to_contain_text("hello.py")
    changes.get_by_role("button", name="README.md").click()
    expect(page.locator(".viewer .diff .add")).to_have_text("+ more")
    expect(page.locator(".viewer .diff .same").first).to_have_text("  # demo")
    shot(page, "05-workspace-diff")

    # A follow-up, its tool call appearing live; what the agent prints is shown as text.
    llm.script(
        key,
        call("terminal", command="echo '<img src=x onerror=window.__xss=2>' && sleep 1"),
        text('<script>window.__xss=1</script><img src=x onerror="window.__xss=3"> done'),
    )
    page.get_by_label("Message", exact=True).fill("Print some")
    page.get_by_label("Message", exact=True).press("Shift+Enter")
    page.get_by_label("Message", exact=True).press_sequentially("markup")
    page.get_by_label("Message", exact=True).press("Enter")
    expect(page.locator(".event-message.from-user .text").last).to_have_text("Print some\nmarkup")
    expect(page.get_by_label("Message", exact=True)).to_have_value("")
    expect(
        page.locator(".event-action .output", has_text="<img src=x onerror=window.__xss=2>")
    ).to_be_visible(timeout=SLOW)
    expect(page.locator(".event-message.from-agent .text").last).to_have_text(
        '<script>window.__xss=1</script><img src=x onerror="window.__xss=3"> done', timeout=SLOW
    )
    assert page.evaluate("window.__xss") is None
    assert page.locator("main img, main script").count() == 0
    shot(page, "06-conversation-markup-as-text")

    # Confirmation: every action waits; approving it runs it.
    page.get_by_label("Ask before each action").check()
    expect(page.locator("#notice")).to_contain_text("Every action now waits")
    llm.script(
        key,
        call("terminal", command="echo approved > approved.txt"),
        call("finish", message="approved it"),
    )
    page.get_by_label("Message", exact=True).fill("Write approved.txt")
    sent_at = time.monotonic()
    page.get_by_role("button", name="Send").click()
    approve = page.get_by_role("button", name="Approve")
    expect(approve).to_be_visible(timeout=SLOW)
    expect(page.locator(".event-action.waiting .call")).to_contain_text("approved.txt")
    # The card repeats the command it asks about, and shows where it is in the transcript.
    card = page.locator(".confirm")
    expect(card.locator(".call")).to_have_text("$ echo approved > approved.txt")
    page.evaluate("window.scrollTo(0, 0)")
    card.get_by_role("button", name="Show it in the transcript").click()
    expect(page.locator(".event-action.waiting")).to_be_in_viewport()
    # Its timer counts from the request alone (not from the conversation's previous run).
    line = page.locator(".progress-line")
    expect(line).to_have_text(re.compile(r"^\s*Waiting for your approval \d+ s\s*$"))
    waited = int(re.findall(r"(\d+) s", line.inner_text())[0])
    assert waited <= time.monotonic() - sent_at + 1, (waited, line.inner_text())
    assert (
        api.get(
            f"/api/v1/app-conversations/{cid}/file", params={"path": "approved.txt"}
        ).status_code
        == 404
    )
    shot(page, "07-conversation-confirmation")
    approve.click()
    expect(approve).to_be_hidden()
    expect(page.locator(".event-action", has_text="approved.txt").locator(".result")).to_be_visible(
        timeout=SLOW
    )
    expect(page.locator(".meta")).to_contain_text("Finished", timeout=SLOW)
    assert (
        api.get(f"/api/v1/app-conversations/{cid}/file", params={"path": "approved.txt"}).text
        == "approved\n"
    )
    page.get_by_label("Ask before each action").uncheck()
    expect(page.locator("#notice")).to_contain_text("without approval")

    # A long command: its output shows as it comes (the transient path, never stored), the
    # progress line says what runs and for how long; Stop, beside the message box and in view
    # wherever the page is scrolled, stops it.
    llm.script(key, call("terminal", command="echo live-line && sleep 120"))
    page.get_by_label("Message", exact=True).fill("Run something long")
    page.get_by_label("Message", exact=True).press("Enter")
    running = page.locator(".event-action[data-tool='terminal']", has_text="sleep 120")
    expect(running.locator(".live-output")).to_have_text("live-line", timeout=SLOW)
    expect(running.locator(".result-state")).to_have_text("Running; its output so far:")
    expect(page.locator(".progress-line")).to_contain_text(
        re.compile(r"Running a command: \$ echo live-line && sleep 120\s*\d+ s · working for \d+ s")
    )
    shot(page, "08-conversation-live-output")
    assert commands_in(plane, sid).count("sleep 120") == 1
    stop = page.get_by_role("button", name="Stop", exact=True)
    for scrolled in ("0", "document.documentElement.scrollHeight"):
        page.evaluate(f"window.scrollTo(0, {scrolled})")
        expect(stop).to_be_in_viewport(ratio=1)
    assert page.locator(".composer").filter(has=stop).count() == 1
    stop.click()
    expect(page.locator(".events")).to_contain_text("Interrupted by the user", timeout=SLOW)
    expect(running.locator(".live-output")).to_have_count(0, timeout=SLOW)
    expect(page.locator(".progress-line")).to_be_hidden(timeout=SLOW)
    expect(stop).to_be_hidden()
    wait_for(
        lambda: conversation(api, cid)["execution_status"] not in ("running", None),
        30,
        what="the run to end",
    )
    wait_for(lambda: "sleep 120" not in commands_in(plane, sid), 30, what="the command to end")
    shot(page, "08-conversation-stopped")
    stored = api.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 100}).json()
    assert stored["items"] and not [
        e for e in stored["items"] if e["kind"] == "StreamingDeltaEvent"
    ]

    # Pause: taken between steps, so the next call never runs.
    llm.script(
        key, call("terminal", command="sleep 3"), call("terminal", command="echo never-runs")
    )
    page.get_by_label("Message", exact=True).fill("Sleep a while")
    page.get_by_role("button", name="Send").click()
    expect(page.locator(".event-action .call", has_text="sleep 3")).to_be_visible(timeout=SLOW)
    expect(page.locator(".progress-line")).to_contain_text(
        re.compile(r"Running a command: \$ sleep 3\s*\d+ s · working for \d+ s")
    )
    shot(page, "08-conversation-progress")
    page.get_by_role("button", name="Pause").click()
    expect(page.locator(".events")).to_contain_text("Paused by the user")
    expect(page.locator(".meta")).to_contain_text("Paused", timeout=SLOW)
    expect(page.locator(".events")).not_to_contain_text("never-runs")
    shot(page, "09-conversation-paused")
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
    page.get_by_label("Message", exact=True).press("Enter")
    expect(page).to_have_url(re.compile(r"#/conversations/[0-9a-f-]{36}$"), timeout=SLOW)
    second = page.url.rsplit("/", 1)[-1]
    assert conversation(api, second)["sandbox_id"] == sid
    expect(page.locator(".title-text")).to_have_text("Titled: A second one", timeout=SLOW)
    page.get_by_role("link", name="Conversations").click()
    rows = page.locator("tbody tr")
    expect(rows).to_have_count(2)
    expect(page.get_by_text("2 conversations", exact=True)).to_be_visible()
    expect(page.locator(f"tr[data-sandbox-id='{sid}']")).to_have_count(2)
    shot(page, "10-conversations-grouped")

    # The list a person scans: title, last activity (relative, the moment in full as its
    # title), status in words, the most recently active first; nothing scrolls sideways at
    # 1280 px.
    page.set_viewport_size({"width": 1280, "height": 900})
    expect(page.locator("thead th")).to_have_text(
        ["Conversation", "Last activity", "Status", "Cost", "Actions"]
    )
    expect(rows.first.locator("a")).to_have_text("Titled: A second one")
    expect(rows.nth(1).locator("td").nth(2)).to_have_text("Paused")
    expect(rows.first.locator("time")).to_have_text(
        re.compile(r"^(just now|\d+ s ago|\d+ min ago)$")
    )
    assert_no_raw_status(page)
    assert page.evaluate(
        "document.scrollingElement.scrollWidth <= document.scrollingElement.clientWidth"
    )
    assert page.locator(".table-wrap").evaluate("(e) => e.scrollWidth <= e.clientWidth")
    # A delete being confirmed stays open while the list is read again (and changes under it).
    hello = page.locator(f"tr[data-conversation-id='{cid}']")
    hello.get_by_role("button", name="Delete Hello script").click()
    confirm = hello.get_by_role("button", name='Delete "Hello script" for good')
    expect(confirm).to_be_focused()
    reads = int(page.locator("section[data-reads]").get_attribute("data-reads") or "0")
    api.patch(f"/api/v1/app-conversations/{second}", json={"title": "Renamed meanwhile"})
    expect(rows.first.locator("a")).to_have_text("Renamed meanwhile", timeout=SLOW)
    assert int(page.locator("section[data-reads]").get_attribute("data-reads") or "0") > reads
    expect(confirm).to_be_visible()
    expect(confirm).to_be_focused()
    shot(page, "10-conversations-delete-kept")
    hello.get_by_role("button", name="Cancel").click()
    expect(confirm).to_be_hidden()
    page.set_viewport_size({"width": 1200, "height": 900})

    # Sandboxes: two conversations in one, shown by its name (no page shows the 32-hex id);
    # pause, resume, rename, delete asked in place by name. Each card says why its sandbox is
    # in its status.
    page.get_by_role("link", name="Sandboxes").click()
    card = page.locator(f"li[data-sandbox-id='{sid}']")
    expect(card).to_contain_text("Conversations2")
    name = api.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["name"]
    expect(card.locator("h2")).to_contain_text(name)
    assert sid not in page.locator("main").inner_text()
    expect(card.locator(".meta")).not_to_contain_text("Pauses when idle at—")
    expect(card.locator(".meta")).to_contain_text(re.compile(r"Disk[\d.]+ \w+ of [\d.]+ GiB used"))
    card.get_by_role("button", name="Pause").click()
    expect(card.locator("h2")).to_contain_text("Paused")
    expect(card.locator(".why-line")).to_have_text("Paused: you paused it")
    expect(card).not_to_contain_text("Deleted at—")
    shot(page, "11-sandboxes-paused")
    card.get_by_role("button", name="Resume").click()
    expect(card.locator("h2")).to_contain_text("Running")
    expect(card.locator(".why-line")).to_have_text("Running: you resumed it")
    # Renamed in place: a name that is not one is refused where it was typed.
    card.get_by_role("button", name="Rename").click()
    card.get_by_label("New name").fill("hello box!")
    card.get_by_role("button", name="Save name").click()
    expect(card.locator(".rename-sandbox .form-result")).to_contain_text("Not saved")
    card.get_by_label("New name").fill("Hello box")
    card.get_by_role("button", name="Save name").click()
    expect(card.locator("h2")).to_contain_text("Hello box")
    expect(card.get_by_label("New name")).to_be_hidden()
    assert api.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["name"] == "Hello box"
    # Delete asks once, by name, in place: Cancel keeps it.
    card.get_by_role("button", name="Delete sandbox").click()
    asked = card.get_by_role("group", name="Delete this sandbox?")
    expect(asked).to_contain_text("Delete Hello box and its 2 conversations?")
    asked.get_by_role("button", name="Cancel").click()
    expect(asked).to_be_hidden()
    assert api.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["status"] == "RUNNING"

    # Half an hour without activity: the reconciler pauses it, and the card says so.
    clock.offset = 1800
    wait_for(
        lambda: api.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["status"] == "PAUSED",
        30,
        what="the idle pause",
    )
    page.reload()
    expect(card.locator(".why-line")).to_have_text("Paused: idle for 30 min")
    shot(page, "12-sandboxes-idle")
    card.get_by_role("button", name="Delete sandbox").click()
    card.get_by_role("group", name="Delete this sandbox?").get_by_role(
        "button", name="Delete", exact=True
    ).click()
    expect(card.locator("h2")).to_contain_text("Missing")
    expect(card.locator(".why-line")).to_have_text("Missing: you deleted it")
    shot(page, "13-sandboxes-deleted")

    # Its conversations are read-only now, saying why; the transcript stays, with each change
    # of the sandbox's status in it where it happened.
    page.goto(f"{plane.url}/#/conversations/{cid}")
    expect(page.get_by_role("alert")).to_contain_text(
        "Read-only: the sandbox is missing (you deleted it)"
    )
    expect(page.locator(".meta")).to_contain_text("Missing you deleted it")
    assert_no_raw_status(page)
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    expect(page.get_by_role("button", name="Pause")).to_be_disabled()
    expect(page.locator(".event-action .call", has_text="approved.txt")).to_be_visible()
    expect(page.locator(".event-sandbox .text")).to_have_text(
        [
            "Paused: you paused it",
            "Running: you resumed it",
            "Paused: idle for 30 min",
            "Missing: you deleted it",
        ]
    )
    page.locator(".event-sandbox").nth(2).scroll_into_view_if_needed()
    shot(page, "14-conversation-read-only")
    assert conversation(api, cid)["sandbox_status"] == "MISSING"

    # At phone width nothing runs off the side.
    page.set_viewport_size({"width": 390, "height": 844})
    page.get_by_role("link", name="Conversations").click()
    expect(page.locator("tbody tr")).to_have_count(2)
    shot(page, "15-conversations-phone")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.goto(f"{plane.url}/#/conversations/{cid}")
    expect(page.locator(".event-action").first).to_be_visible()
    shot(page, "16-conversation-phone")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390

    # Dead conversations: one archived (hidden from the list, then shown again on asking),
    # the other deleted from its own page.
    page.set_viewport_size({"width": 1200, "height": 900})
    page.get_by_role("link", name="Conversations").click()
    page.get_by_role("button", name="Archive Hello script").click()
    expect(page.locator("#notice")).to_contain_text("Archived")
    expect(rows).to_have_count(1)
    expect(page.locator("p.muted", has_text="conversations")).to_contain_text(
        "1 archived not shown"
    )
    assert conversation(api, cid)["tags"] == {"archived": "yes"}
    page.get_by_label("Show archived").check()
    expect(rows).to_have_count(2)
    page.goto(f"{plane.url}/#/conversations/{second}")
    # Its record shown first: the lines it adds above the toolbar move the buttons down, and a
    # click sent while they move lands on whatever came under it.
    expect(page.locator(".banner[role=alert]")).to_contain_text("Read-only: the sandbox is missing")
    page.get_by_role("button", name="Delete conversation").click()
    shot(page, "17-conversation-delete")
    page.get_by_role("group", name="Delete this conversation?").get_by_role(
        "button", name="Delete"
    ).click()
    expect(page).to_have_url(re.compile(r"#/conversations$"))
    expect(page.locator("#notice")).to_contain_text("Conversation deleted")
    assert api.get("/api/v1/app-conversations", params={"ids": second}).json() == [None]
    assert conversation(api, cid)["title"] == "Hello script"

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert page.evaluate("sessionStorage.length") == 0  # the key, and the starts' messages
    context.close()
    assert problems == []


def test_streaming_text_shows_as_it_is_written(
    plane: ControlPlane, llm: ScriptedLLM, key: str, browser: Browser
) -> None:
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
        ["Missing: the sandbox's process vanished"], timeout=SLOW
    )
    expect(page.get_by_role("alert")).to_contain_text(
        "Read-only: the sandbox is missing (the sandbox's process vanished)"
    )
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    shot(page, "03-sandbox-vanished")
    page.context.close()
    assert problems == []


def test_a_failing_model_is_said_in_words(
    plane: ControlPlane, llm: ScriptedLLM, key: str, browser: Browser
) -> None:
    shot = Shots("errors")
    api_key = new_user(plane, "carol")
    api = plane.client(api_key)
    configure_llm(api, llm.base_url(key), tools=["terminal"])
    task = start(api)  # idle
    cid, sid = task["app_conversation_id"], task["sandbox_id"]
    page, problems = signed_in(browser, plane, api_key)
    expect(page.get_by_role("heading", name="Conversations", exact=True)).to_be_visible()
    page.goto(f"{plane.url}/#/conversations/{cid}")
    wait_for(lambda: agent_sockets(api, sid) == 1, 30, what="the control plane's socket")

    # A rate limit: the progress line says the call is retried, and when.
    llm.script(
        key,
        error(429, "Rate limit reached", retry_after=5),
        error(401, "Incorrect API key provided: sk-te****"),
    )
    page.get_by_label("Message", exact=True).fill("Do something")
    page.get_by_label("Message", exact=True).press("Enter")
    expect(page.locator(".progress-line")).to_contain_text(
        re.compile(r"The model call failed \(RateLimitError\): retrying in [1-5] s"), timeout=SLOW
    )
    shot(page, "00-retrying")

    # What went wrong in words, the setting that fixes it a click away, the original text kept.
    failure = page.locator(".event-error")
    expect(failure.locator(".plain-error")).to_contain_text(
        "The language model refused the API key.", timeout=SLOW
    )
    expect(failure.locator("details.raw pre")).to_contain_text("AuthenticationError")
    expect(page.locator(".progress-line")).to_be_hidden()
    shot(page, "01-plain-error")
    failure.get_by_role("link", name="Set the API key in Settings").click()
    expect(page.get_by_role("heading", name="Settings")).to_be_visible()
    expect(page.get_by_label("API key", exact=True)).to_be_visible()
    page.context.close()
    assert problems == []


def test_the_demo_model_runs_a_conversation(
    plane: ControlPlane, llm: ScriptedLLM, key: str, browser: Browser
) -> None:
    """`make demo`'s scripted model (tests/support/demo.py) through the console: what a newcomer
    sees before having a key. Its screenshots are docs/console.md's."""
    shot = Shots("demo")
    api_key = new_user(plane, "dora")
    api = plane.client(api_key)
    configure_llm(api, llm.base_url(key), tools=["terminal", "file_editor"])
    llm.responder = demo_reply
    try:
        page, problems = signed_in(browser, plane, api_key)
        page.set_viewport_size({"width": 1100, "height": 760})
        page.get_by_label("Message", exact=True).fill("Print a greeting for the team")
        page.get_by_label("Message", exact=True).press("Enter")
        expect(page).to_have_url(re.compile(r"#/conversations/[0-9a-f-]{36}$"), timeout=SLOW)
        expect(page.locator(".title-text")).to_have_text(
            "Demo: Print a greeting for the", timeout=SLOW
        )
        expect(page.locator(".finish .text")).to_contain_text(
            "I wrote hello.py and ran it", timeout=SLOW
        )
        expect(
            page.locator(
                ".event-action[data-tool='terminal']", has_text="python3 hello.py"
            ).locator(".result")
        ).to_contain_text("Hello from the demo model! You asked: Print a greeting")
        expect(
            page.locator(".event-action[aria-label='Edited hello.py'] > pre.diff .add")
        ).to_contain_text("Hello from the demo model")
        page.locator(".event-action[aria-label='Edited hello.py']").scroll_into_view_if_needed()
        page.evaluate("window.scrollBy(0, -140)")
        page.screenshot(path=str(shot.dir / "transcript.png"))
        page.evaluate("window.scrollTo(0, 0)")
        page.locator("aside.workspace").get_by_role("tab", name="Files").click()
        page.get_by_role("list", name="Files").get_by_role("button", name="hello.py").click()
        expect(page.locator(".file-text")).to_contain_text("Hello from the demo model!")
        page.screenshot(path=str(shot.dir / "workspace.png"))
        page.get_by_role("link", name="Settings").click()
        page.get_by_role("button", name="Test connection").click()
        expect(page.locator(".test-result")).to_have_text(
            "Connected: openai/test-model answered.", timeout=SLOW
        )
        page.screenshot(path=str(shot.dir / "settings.png"))
        page.context.close()
        assert problems == []
    finally:
        llm.responder = None
