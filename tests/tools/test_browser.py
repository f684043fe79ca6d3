"""browser_tool_set against a real Chromium and pages served on loopback by the test itself."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import threading
import time
import zipfile
from collections.abc import AsyncIterator, Iterator
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import pytest_asyncio

from core.processes import find_process, group_members
from events.tools.browser import BrowserObservation
from tools.base import ImageContent, Tool, ToolContext
from tools.browser import TOOL_SET, BrowserManager, BrowserSettings

pytestmark = [
    pytest.mark.e2e,  # real Chromium
    pytest.mark.skipif(
        not Path(os.environ.get("AGENT_SERVER_CHROMIUM", "/usr/bin/chromium")).exists(),
        reason="Chromium is not installed (make system-deps)",
    ),
    # One loop for the module, so most tests share one Chromium (as conversations of a
    # server do) instead of paying a browser start each; tests of the process itself make
    # their own manager.
    pytest.mark.asyncio(loop_scope="module"),
]

# -- the site --------------------------------------------------------------------------------

FORM = """<!doctype html><title>Form</title>
<h1>Sign the guest book</h1>
<form action="/submitted" method="get">
  <input name="q" placeholder="Your name">
  <select name="colour"><option>Red</option><option>Blue</option></select>
  <button type="submit">Send</button>
</form>
<p><a href="/second">Second page</a></p>"""

PAGES: dict[str, str] = {
    "/form": FORM,
    "/second": "<!doctype html><title>Second</title><h1>Second page</h1><p>Welcome here.</p>",
    "/storage": """<!doctype html><title>Storage</title><p id="out">setting</p>
<script>localStorage.setItem('token', 'tok-42');
document.getElementById('out').textContent = 'stored';</script>""",
    "/show-storage": """<!doctype html><title>Show storage</title><p id="out"></p>
<script>document.getElementById('out').textContent =
  'token is ' + localStorage.getItem('token');</script>""",
    "/never": """<!doctype html><title>Never</title><h1>Partly here</h1>
<p>Still loading an image.</p><img src="/hang" alt="">""",
    "/busy": """<!doctype html><title>Busy</title>
<button onclick="while (true) {}">Freeze</button>""",
    "/long": "<!doctype html><title>Long</title>"
    + "".join(f"<p>Paragraph number {i:03d} of the long page.</p>" for i in range(200)),
}


class Site:
    """A loopback HTTP server in a thread; `release` ends requests that hang on purpose."""

    def __init__(self) -> None:
        self.release = threading.Event()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                headers: dict[str, str] = {}
                if url.path == "/slow":
                    time.sleep(3)
                    body = "<!doctype html><title>Slow</title><h1>Slow page arrived</h1>"
                elif url.path == "/hang":
                    site.release.wait(60)
                    body = ""
                elif url.path == "/submitted":
                    query = parse_qs(url.query)
                    name, colour = query.get("q", [""])[0], query.get("colour", [""])[0]
                    body = (
                        f"<!doctype html><title>Thanks</title><h1>Hello, {name}!</h1>"
                        f"<p>You like {colour}.</p>"
                    )
                elif url.path == "/set-cookie":
                    headers["Set-Cookie"] = "session=s3cret; Path=/"
                    body = "<!doctype html><title>Cookie</title><p>cookie set</p>"
                elif url.path == "/show-cookie":
                    jar = SimpleCookie(self.headers.get("Cookie", ""))
                    value = jar["session"].value if "session" in jar else "none"
                    body = f"<!doctype html><title>Cookie</title><p>session cookie: {value}</p>"
                elif url.path in PAGES:
                    body = PAGES[url.path]
                else:
                    self.send_error(404)
                    return
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Site:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with Site() as s:
        yield s


# -- helpers ---------------------------------------------------------------------------------


class Conversation:
    """One conversation's browser tools, called by name."""

    def __init__(self, tools: list[Tool]) -> None:
        self.tools = {t.name: t for t in tools}

    async def __call__(self, name: str, **arguments: Any) -> BrowserObservation:
        tool = self.tools[name]
        observation = await tool.run(tool.parse(arguments))
        assert isinstance(observation, BrowserObservation)
        return observation

    async def ok(self, name: str, **arguments: Any) -> str:
        observation = await self(name, **arguments)
        assert not observation.is_error, observation.text
        return observation.text

    async def close(self) -> None:
        for tool in self.tools.values():
            await tool.close()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def manager() -> AsyncIterator[BrowserManager]:
    m = BrowserManager()
    try:
        yield m
    finally:
        await m.close()


@pytest_asyncio.fixture(loop_scope="module")
async def open_conversation(tmp_path: Path, manager: BrowserManager) -> AsyncIterator[Any]:
    opened: list[Conversation] = []

    def factory(name: str = "c1", **params: Any) -> Conversation:
        ctx = ToolContext(
            conversation_id=name,
            working_dir=tmp_path / name / "workspace",
            state_dir=tmp_path / name / "state",
            vision=params.pop("vision", False),
            browser=lambda: manager,
        )
        conversation = Conversation(TOOL_SET.make(ctx, {"timeout": 15, **params}))
        opened.append(conversation)
        return conversation

    try:
        yield factory
    finally:
        for conversation in opened:
            await conversation.close()


def element_index(state: str, pattern: str) -> int:
    """The [index] of the first element line of get_state matching `pattern`."""
    for line in state.splitlines():
        m = re.match(r"\[(\d+)\] (.*)", line)
        if m and re.search(pattern, m.group(2)):
            return int(m.group(1))
    raise AssertionError(f"no element matches {pattern!r} in:\n{state}")


def tab_ids(listing: str) -> tuple[list[str], str]:
    """Tab ids of a browser_list_tabs text, and the current one."""
    ids, current = [], ""
    for line in listing.splitlines()[1:]:
        m = re.match(r"([* ]) ([0-9a-f]{4}) ", line)
        assert m, line
        ids.append(m.group(2))
        if m.group(1) == "*":
            current = m.group(2)
    return ids, current


def alive(pids: list[int]) -> list[int]:
    """Those of `pids` still running (zombies count as gone)."""
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(pid)
    return out


async def wait_until_gone(pids: list[int], limit: float = 20.0) -> list[int]:
    """Waits without blocking the loop: Playwright must keep running to close things."""
    deadline = time.monotonic() + limit
    while alive(pids) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return alive(pids)


# -- the tool set's shape --------------------------------------------------------------------


async def test_tool_set_shape(tmp_path: Path) -> None:
    ctx = ToolContext(
        conversation_id="c", working_dir=tmp_path, state_dir=tmp_path / "s", browser=lambda: manager
    )
    manager = BrowserManager()
    tools = TOOL_SET.make(ctx, {})
    names = {t.name: t for t in tools}
    assert set(names) == {
        "browser_navigate", "browser_click", "browser_type", "browser_get_state",
        "browser_get_content", "browser_scroll", "browser_go_back", "browser_list_tabs",
        "browser_switch_tab", "browser_close_tab", "browser_get_storage",
        "browser_set_storage", "browser_start_recording", "browser_stop_recording",
    }  # fmt: skip
    assert manager.pid is None, "making the tools must not start a browser"
    read_only = {n for n, t in names.items() if t.read_only}
    assert read_only == {
        "browser_get_state", "browser_get_content", "browser_list_tabs", "browser_get_storage"
    }  # fmt: skip
    assert TOOL_SET.observation_types[0].__name__ == "BrowserObservation"
    assert "BrowserAction" in {t.__name__ for t in TOOL_SET.action_types}
    for tool in tools:
        definition = tool.definition()
        assert definition.action_type == type(tool).action_type.__name__
        for prop in definition.parameters["properties"].values():
            assert prop.get("description"), definition
    click = names["browser_click"].parameters()
    assert click["required"] == ["index"]
    assert click["properties"]["index"]["minimum"] == 0
    action = names["browser_navigate"].parse({"url": "http://x", "summary": "open x"})
    assert action.kind == "BrowserNavigateAction"
    assert len(TOOL_SET.make(ctx, {"headless": True})) == 14
    with pytest.raises(ValueError):
        TOOL_SET.make(ctx, {"timeout": -1})
    with pytest.raises(ValueError):  # no manager in the context: the server forgot to give one
        TOOL_SET.make(
            ToolContext(conversation_id="c", working_dir=tmp_path, state_dir=tmp_path / "s"), {}
        )


# -- pages -----------------------------------------------------------------------------------


async def test_navigate_and_get_content(site: Site, open_conversation: Any) -> None:
    c = open_conversation()
    nowhere = await c("browser_go_back")
    assert nowhere.is_error and "no earlier page" in nowhere.text
    text = await c.ok("browser_navigate", url=f"{site.url}/form")
    assert "Title: Form" in text
    content = await c.ok("browser_get_content")
    assert "# Sign the guest book" in content
    assert "Second page" in content and "](" not in content
    linked = await c.ok("browser_get_content", extract_links=True)
    assert f"[Second page]({site.url}/second)" in linked


async def test_get_state_type_click_and_go_back(site: Site, open_conversation: Any) -> None:
    c = open_conversation()
    await c.ok("browser_navigate", url=f"{site.url}/form")
    state = await c.ok("browser_get_state")
    field = element_index(state, r'^<input name=q placeholder="Your name"> value=""')
    select = element_index(state, r'^<select name=colour> value="Red" options: Red \| Blue')
    button = element_index(state, r"^<button type=submit> Send")
    link = element_index(state, r"^<a> Second page")
    assert len({field, select, button, link}) == 4

    await c.ok("browser_type", index=field, text="Ada Lovelace")
    await c.ok("browser_type", index=select, text="Blue")
    wrong = await c("browser_type", index=select, text="Green")
    assert wrong.is_error and "Red | Blue" in wrong.text
    assert 'value="Ada Lovelace"' in await c.ok("browser_get_state")
    clicked = await c.ok("browser_click", index=button)
    assert "/submitted?q=Ada+Lovelace&colour=Blue" in clicked
    content = await c.ok("browser_get_content")
    assert "# Hello, Ada Lovelace!" in content and "You like Blue." in content

    back = await c.ok("browser_go_back")
    assert f"URL: {site.url}/form" in back

    # The numbers of the form page no longer exist on the second page.
    await c.ok("browser_navigate", url=f"{site.url}/second")
    stale = await c("browser_click", index=button)
    assert stale.is_error
    assert f"No element has index {button}" in stale.text


async def test_tabs(site: Site, open_conversation: Any) -> None:
    c = open_conversation()
    await c.ok("browser_navigate", url=f"{site.url}/form")
    link = element_index(await c.ok("browser_get_state"), r"Second page")
    opened = await c.ok("browser_click", index=link, new_tab=True)
    assert "new tab" in opened and "Title: Second" in opened

    ids, current = tab_ids(await c.ok("browser_list_tabs"))
    assert len(ids) == 2 and current == ids[1]
    assert all(len(i) == 4 for i in ids)

    switched = await c.ok("browser_switch_tab", tab_id=ids[0])
    assert "Title: Form" in switched
    assert tab_ids(await c.ok("browser_list_tabs"))[1] == ids[0]

    closed = await c.ok("browser_close_tab", tab_id=ids[1])
    assert tab_ids(closed.split("\n", 1)[1])[0] == [ids[0]]
    missing = await c("browser_switch_tab", tab_id=ids[1])
    assert missing.is_error and ids[0] in missing.text

    new = await c.ok("browser_navigate", url=f"{site.url}/second", new_tab=True)
    assert "(2 open)" in new


async def test_scroll_and_paged_content(site: Site, open_conversation: Any) -> None:
    c = open_conversation(max_content_chars=1000)
    await c.ok("browser_navigate", url=f"{site.url}/long")
    assert "Scrolled down" in await c.ok("browser_scroll")
    assert "Scrolled up" in await c.ok("browser_scroll", direction="up")

    first = await c("browser_get_content")
    assert not first.is_error and first.full_output_save_dir
    assert "Paragraph number 000" in first.text and "Paragraph number 199" not in first.text
    m = re.search(r"start_from_char=(\d+)", first.text)
    assert m, first.text
    second = await c.ok("browser_get_content", start_from_char=int(m.group(1)))
    assert "Paragraph number 000" not in second
    saved = list(Path(first.full_output_save_dir).glob("content-*.md"))
    assert saved and "Paragraph number 199" in saved[0].read_text()
    past = await c("browser_get_content", start_from_char=10**6)
    assert past.is_error


async def test_screenshot(site: Site, open_conversation: Any) -> None:
    plain = open_conversation("plain")
    await plain.ok("browser_navigate", url=f"{site.url}/form")
    observation = await plain("browser_get_state", include_screenshot=True)
    assert not any(isinstance(c, ImageContent) for c in observation.content)
    m = re.search(r"Screenshot saved to (\S+\.png)", observation.text)
    assert m and Path(m.group(1)).read_bytes().startswith(b"\x89PNG")
    assert observation.screenshot_data is None

    seeing = open_conversation("seeing", vision=True)
    await seeing.ok("browser_navigate", url=f"{site.url}/form")
    observation = await seeing("browser_get_state", include_screenshot=True)
    images = [c for c in observation.content if isinstance(c, ImageContent)]
    assert images and images[0].image_urls[0].startswith("data:image/png;base64,")


# -- loading limits --------------------------------------------------------------------------


async def test_slow_page_loads(site: Site, open_conversation: Any) -> None:
    c = open_conversation()
    text = await c.ok("browser_navigate", url=f"{site.url}/slow")
    assert "Title: Slow" in text
    assert "# Slow page arrived" in await c.ok("browser_get_content")


async def test_page_that_never_finishes_loading(site: Site, open_conversation: Any) -> None:
    c = open_conversation(timeout=3)
    text = await c.ok("browser_navigate", url=f"{site.url}/never")
    assert "did not finish loading within 3 s" in text
    assert "Title: Never" in text
    assert "Still loading an image." in await c.ok("browser_get_content")


async def test_hung_page_gives_an_error_not_a_hang(site: Site, open_conversation: Any) -> None:
    c = open_conversation(timeout=1)
    await c.ok("browser_navigate", url=f"{site.url}/busy")
    freeze = element_index(await c.ok("browser_get_state"), "Freeze")
    await c("browser_click", index=freeze)  # may or may not return before the loop starts
    stuck = await c("browser_get_content")
    assert stuck.is_error
    assert "did not answer within" in stuck.text or "Timed out" in stuck.text
    # Another tab still works.
    assert "Title: Second" in await c.ok("browser_navigate", url=f"{site.url}/second", new_tab=True)


# -- storage and isolation -------------------------------------------------------------------


async def test_storage_round_trip(site: Site, open_conversation: Any) -> None:
    a = open_conversation("a")
    await a.ok("browser_navigate", url=f"{site.url}/storage")
    await a.ok("browser_navigate", url=f"{site.url}/set-cookie")
    text = await a.ok("browser_get_storage")
    state = json.loads(text.split("\n", 1)[1])
    assert any(c["name"] == "session" and c["value"] == "s3cret" for c in state["cookies"])
    [origin] = [o for o in state["origins"] if o["origin"] == site.url]
    assert {"name": "token", "value": "tok-42"} in origin["localStorage"]

    b = open_conversation("b")
    await b.ok("browser_navigate", url=f"{site.url}/show-storage")
    assert "token is null" in await b.ok("browser_get_content")
    assert "Set 1 cookies and 1 localStorage" in await b.ok(
        "browser_set_storage", storage_state=state
    )
    await b.ok("browser_navigate", url=f"{site.url}/show-storage")
    assert "token is tok-42" in await b.ok("browser_get_content")
    await b.ok("browser_navigate", url=f"{site.url}/show-cookie")
    assert "session cookie: s3cret" in await b.ok("browser_get_content")
    assert len(tab_ids(await b.ok("browser_list_tabs"))[0]) == 1, "no scratch tab is listed"

    bad = await b("browser_set_storage", storage_state={"cookies": [{"value": "x"}]})
    assert bad.is_error


async def test_conversations_do_not_share_cookies(site: Site, open_conversation: Any) -> None:
    a, b = open_conversation("a"), open_conversation("b")
    await a.ok("browser_navigate", url=f"{site.url}/set-cookie")
    await a.ok("browser_navigate", url=f"{site.url}/show-cookie")
    assert "session cookie: s3cret" in await a.ok("browser_get_content")
    await b.ok("browser_navigate", url=f"{site.url}/show-cookie")
    assert "session cookie: none" in await b.ok("browser_get_content")


# -- recording -------------------------------------------------------------------------------


async def test_recording(site: Site, open_conversation: Any, tmp_path: Path) -> None:
    c = open_conversation()
    assert (await c("browser_stop_recording")).is_error
    await c.ok("browser_start_recording")
    assert (await c("browser_start_recording")).is_error
    await c.ok("browser_navigate", url=f"{site.url}/form")
    await c.ok("browser_get_state")
    text = await c.ok("browser_stop_recording")
    m = re.search(r"Recording saved to (\S+\.zip)", text)
    assert m, text
    path = Path(m.group(1))
    assert path.parent == tmp_path / "c1" / "workspace" / ".browser_recordings"
    assert path.stat().st_size > 0
    with zipfile.ZipFile(path) as z:
        assert any(n.endswith(".trace") for n in z.namelist())


# -- the process -----------------------------------------------------------------------------


async def test_killed_browser_is_replaced(site: Site, tmp_path: Path) -> None:
    manager = BrowserManager()
    ctx = ToolContext(
        conversation_id="c", working_dir=tmp_path, state_dir=tmp_path / "s", browser=lambda: manager
    )
    c = Conversation(TOOL_SET.make(ctx, {"timeout": 15}))
    try:
        await c.ok("browser_navigate", url=f"{site.url}/form")
        pid = manager.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert await wait_until_gone([pid]) == []

        text = await c.ok("browser_navigate", url=f"{site.url}/second")
        assert "crashed or was killed and has been restarted" in text
        assert "Title: Second" in text
        assert manager.pid not in (None, pid)
        # The note is said once.
        assert "restarted" not in await c.ok("browser_get_content")
    finally:
        await c.close()
        await manager.close()


async def test_idle_browser_is_closed_and_restarted(site: Site, tmp_path: Path) -> None:
    manager = BrowserManager(BrowserSettings(idle_timeout=0.5))
    ctx = ToolContext(
        conversation_id="c", working_dir=tmp_path, state_dir=tmp_path / "s", browser=lambda: manager
    )
    c = Conversation(TOOL_SET.make(ctx, {"timeout": 15}))
    try:
        await c.ok("browser_navigate", url=f"{site.url}/form")
        pids = manager.process_ids()
        assert pids
        deadline = time.monotonic() + 20
        while manager.pid is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert manager.pid is None
        assert await wait_until_gone(pids) == []
        text = await c.ok("browser_navigate", url=f"{site.url}/second")
        assert "closed after a period without use and has been restarted" in text
    finally:
        await c.close()
        await manager.close()


async def test_launch_failure_is_an_error_observation(tmp_path: Path) -> None:
    manager = BrowserManager(BrowserSettings(executable=str(tmp_path / "no-chromium")))
    ctx = ToolContext(
        conversation_id="c", working_dir=tmp_path, state_dir=tmp_path / "s", browser=lambda: manager
    )
    c = Conversation(TOOL_SET.make(ctx, {}))
    try:
        observation = await c("browser_navigate", url="http://127.0.0.1:9/")
        assert observation.is_error and "no-chromium" in observation.text
    finally:
        await manager.close()


async def test_closing_leaves_no_chromium(site: Site, tmp_path: Path) -> None:
    manager = BrowserManager()
    conversations = []
    for name in ("a", "b"):
        ctx = ToolContext(
            conversation_id=name,
            working_dir=tmp_path / name,
            state_dir=tmp_path / name / "s",
            browser=lambda: manager,
        )
        conversations.append(Conversation(TOOL_SET.make(ctx, {})))
        await conversations[-1].ok("browser_navigate", url=f"{site.url}/form")
    main = manager.pid
    assert main is not None
    pids = manager.process_ids()
    assert len(pids) > 1, "Chromium's helpers share its process group"
    driver = int(Path(f"/proc/{main}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert driver != os.getpid()

    await conversations[0].close()
    assert manager.pid == main, "one conversation closing leaves the shared browser"
    await conversations[1].close()
    closed = await conversations[1]("browser_get_state")
    assert closed.is_error

    await manager.close()
    assert await wait_until_gone([*pids, driver]) == [], "Chromium and Playwright's driver end"
    assert group_members(main) == [] and find_process(manager.marker) is None
    refused = await Conversation(
        TOOL_SET.make(
            ToolContext(
                conversation_id="z",
                working_dir=tmp_path,
                state_dir=tmp_path / "z",
                browser=lambda: manager,
            ),
            {},
        )
    )("browser_list_tabs")
    assert refused.is_error and "closed" in refused.text
