"""The fourteen browser tools: each turns its Action into calls on the conversation's
BrowserSession and describes the result for the model."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from playwright.async_api import Frame, Locator, Page, Request, Route
from playwright.async_api import TimeoutError as PlaywrightTimeoutError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tools.base import ImageContent, TextContent, Tool, ToolContext, run_in_thread
from tools.browser.actions import (
    BrowserClickAction,
    BrowserCloseTabAction,
    BrowserGetContentAction,
    BrowserGetStateAction,
    BrowserGetStorageAction,
    BrowserGoBackAction,
    BrowserListTabsAction,
    BrowserNavigateAction,
    BrowserObservation,
    BrowserScrollAction,
    BrowserSetStorageAction,
    BrowserStartRecordingAction,
    BrowserStopRecordingAction,
    BrowserSwitchTabAction,
    BrowserTypeAction,
)
from tools.browser.scripts import (
    INDEX_ELEMENTS_JS,
    MARKDOWN_JS,
    PageIndex,
    index_arguments,
    index_selector,
)
from tools.browser.session import ActionFailed, BrowserSession

#: Seconds a click is given to start a navigation before it is taken to have none.
NAVIGATION_START_WINDOW = 0.5

#: Most elements one get_state numbers; a page with more is summarised.
MAX_ELEMENTS = 400


class BrowserToolParams(BaseModel):
    """Per-conversation settings (the shared Chromium's own are BrowserSettings).

    Unknown keys are ignored (and logged by `make`), not refused: clients written for other
    agent servers send their own tool parameters, and refusing them would fail the whole
    conversation over a setting this implementation has no use for.
    """

    model_config = ConfigDict(extra="ignore")

    timeout: float = Field(
        default=30.0,
        gt=0,
        description="Seconds any one browser call may take, page loads included; a call "
        "that runs out returns an error observation instead of hanging.",
    )
    max_content_chars: int = Field(
        default=30_000,
        gt=0,
        description="Most characters of page text one browser_get_content shows, like the "
        "terminal's output cap; start_from_char pages through the rest.",
    )


@dataclass
class Result:
    """What one action produced, before notes are added and it becomes an observation."""

    text: str
    is_error: bool = False
    image_urls: list[str] = field(default_factory=list)
    full_output_save_dir: str | None = None


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def _normalize_url(url: str) -> str:
    """Bare hosts get a scheme, as a browser's address bar would add one."""
    url = url.strip()
    if "://" in url or url.startswith(("about:", "data:", "javascript:")):
        return url
    local = url.startswith(("localhost", "127.", "[::1]", "0.0.0.0"))
    return ("http://" if local else "https://") + url


def _short(url: str, limit: int = 300) -> str:
    """URLs as shown to the model: a data: URL can be a whole page long."""
    return url if len(url) <= limit else url[: limit - 1] + "\u2026"


async def _page_summary(session: BrowserSession, page: Page) -> str:
    tab_id = session.current_tab_id
    title = await page.title()
    return f"URL: {_short(page.url)}\nTitle: {title}\nTab: {tab_id} ({len(session.tabs())} open)"


async def _goto(page: Page, url: str, timeout: float) -> str:
    """Load `url`; when the load does not finish in time, say so and keep what loaded."""
    try:
        response = await page.goto(url, wait_until="load")
    except PlaywrightTimeoutError:
        return (
            f"The page did not finish loading within {timeout:.0f} s; what follows is what "
            "had loaded by then."
        )
    if response is not None and response.status >= 400:
        return f"Opened {_short(page.url)}, which answered HTTP {response.status}."
    return f"Opened {_short(page.url)}."


async def _settle_after(page: Page, action: Callable[[], Awaitable[None]], timeout: float) -> str:
    """Do `action` (a click) and, if it started a navigation of the page, wait for it.

    Playwright no longer waits for navigations that actions start, and a plain load-state
    wait would see the old, already loaded document; so the main frame's navigation request
    is watched for a short window, then its commit and load are awaited.
    """
    started = asyncio.Event()
    finished = asyncio.Event()

    def on_request(request: Request) -> None:
        if request.is_navigation_request() and request.frame == page.main_frame:
            started.set()

    def on_done(request: Request) -> None:
        if request.is_navigation_request() and request.frame == page.main_frame:
            finished.set()

    def on_navigated(frame: Frame) -> None:
        if frame == page.main_frame:
            finished.set()

    def left() -> float:
        return max(0.1, deadline - time.monotonic())

    # One budget for the whole click, so the call's own limit is not overrun.
    deadline = time.monotonic() + timeout
    page.on("request", on_request)
    page.on("framenavigated", on_navigated)
    page.on("requestfailed", on_done)
    try:
        await action()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(started.wait(), min(NAVIGATION_START_WINDOW, left()))
        if not started.is_set():
            return ""
        try:
            await asyncio.wait_for(finished.wait(), left())
        except TimeoutError:
            return f"The click started loading a page that did not answer within {timeout:.0f} s."
        try:
            await page.wait_for_load_state("load", timeout=left() * 1000)
        except PlaywrightTimeoutError:
            return f"The new page did not finish loading within {timeout:.0f} s."
        return ""
    finally:
        page.remove_listener("request", on_request)
        page.remove_listener("framenavigated", on_navigated)
        page.remove_listener("requestfailed", on_done)


async def _locate(page: Page, index: int) -> Locator:
    """The element `index` of the last numbering pass, or a clear error with fresh numbers."""
    locator = page.locator(index_selector(index))
    if await locator.count():
        return locator.first
    fresh = await _index(page)
    raise ActionFailed(
        f"No element has index {index} now: the page changed since the numbers were given "
        f"(or browser_get_state was not called yet). The elements now are:\n{fresh.describe()}"
    )


async def _index(page: Page) -> PageIndex:
    raw = await page.evaluate(INDEX_ELEMENTS_JS, index_arguments(MAX_ELEMENTS))
    return PageIndex.model_validate(raw)


# -- the tool base ---------------------------------------------------------------------------


class BrowserTool(Tool):
    """A browser tool: its action runs through the conversation's session guard."""

    observation_type = BrowserObservation

    def __init__(
        self, ctx: ToolContext, params: Mapping[str, Any] | None, session: BrowserSession
    ) -> None:
        super().__init__(ctx, params)
        self.session = session
        self.settings = BrowserToolParams.model_validate(self.params)

    async def run(self, action: Any) -> BrowserObservation:
        outcome = await self.session.call(lambda: self.perform(action))
        parts = list(outcome.notes)
        result = outcome.value
        if result is None:
            parts.append(outcome.error or "The browser call failed.")
            return BrowserObservation(content=[TextContent(text="\n\n".join(parts))], is_error=True)
        parts.append(result.text)
        content: list[TextContent | ImageContent] = [TextContent(text="\n\n".join(parts))]
        if result.image_urls:
            content.append(ImageContent(image_urls=result.image_urls))
        return BrowserObservation(
            content=content,
            is_error=result.is_error,
            full_output_save_dir=result.full_output_save_dir,
        )

    @abstractmethod
    async def perform(self, action: Any) -> Result:
        """Carry out the action inside the guard (time limit, crash recovery)."""

    async def close(self) -> None:
        await self.session.close()

    def _output_dir(self) -> Path:
        path = self.ctx.state_dir / "browser"
        path.mkdir(parents=True, exist_ok=True)
        return path


# -- navigation ------------------------------------------------------------------------------


class BrowserNavigateTool(BrowserTool):
    name = "browser_navigate"
    description = (
        "Open a URL in the browser (the current tab, or a new one with new_tab). Returns the "
        "URL and title; use browser_get_state for the clickable elements and "
        "browser_get_content for the text."
    )
    action_type = BrowserNavigateAction

    async def perform(self, action: BrowserNavigateAction) -> Result:
        if action.new_tab:
            _, page = await self.session.new_tab()
        else:
            page = await self.session.page()
        status = await _goto(page, _normalize_url(action.url), self.settings.timeout)
        return Result(f"{status}\n{await _page_summary(self.session, page)}")


class BrowserGoBackTool(BrowserTool):
    name = "browser_go_back"
    description = "Go back to the previous page in the current tab's history."
    action_type = BrowserGoBackAction

    async def perform(self, action: BrowserGoBackAction) -> Result:
        page = await self.session.page()
        before = page.url
        try:
            response = await page.go_back(wait_until="load")
        except PlaywrightTimeoutError:
            return Result(
                f"The previous page did not finish loading within {self.settings.timeout:.0f} s."
                f"\n{await _page_summary(self.session, page)}"
            )
        if response is None and page.url == before:
            return Result("There is no earlier page in this tab's history.", is_error=True)
        return Result(f"Went back.\n{await _page_summary(self.session, page)}")


class BrowserScrollTool(BrowserTool):
    name = "browser_scroll"
    description = "Scroll the current page up or down by most of a screen."
    action_type = BrowserScrollAction

    async def perform(self, action: BrowserScrollAction) -> Result:
        page = await self.session.page()
        sign = 1 if action.direction == "down" else -1
        where = await page.evaluate(
            """(sign) => {
                window.scrollBy(0, sign * Math.round(innerHeight * 0.8));
                const max = document.documentElement.scrollHeight - innerHeight;
                return {y: Math.round(scrollY), max: Math.max(0, Math.round(max))};
            }""",
            sign,
        )
        y, most = int(where["y"]), int(where["max"])
        if most == 0:
            return Result("The page fits in the window; there is nothing to scroll.")
        edge = " (top of the page)" if y <= 0 else " (bottom of the page)" if y >= most else ""
        return Result(f"Scrolled {action.direction}: now at {y} of {most} px{edge}.")


# -- reading ---------------------------------------------------------------------------------


class BrowserGetStateTool(BrowserTool):
    name = "browser_get_state"
    description = (
        "Show the current page's URL, title and numbered interactive elements (links, buttons, "
        "fields); browser_click and browser_type take those numbers. Optionally a screenshot."
    )
    action_type = BrowserGetStateAction
    acts = False
    read_only = True

    async def perform(self, action: BrowserGetStateAction) -> Result:
        page = await self.session.page()
        index = await _index(page)
        text = f"{await _page_summary(self.session, page)}\n{index.describe()}"
        images: list[str] = []
        if action.include_screenshot:
            png = await page.screenshot(type="png")
            path = self._output_dir() / f"screenshot-{_stamp()}.png"
            await run_in_thread(path.write_bytes, png)
            text += f"\nScreenshot saved to {path}."
            if self.ctx.vision:
                images.append("data:image/png;base64," + base64.b64encode(png).decode("ascii"))
        return Result(text, image_urls=images)


class BrowserGetContentTool(BrowserTool):
    name = "browser_get_content"
    description = (
        "Return the current page's readable text as markdown (headings, paragraphs, lists, "
        "tables; links too with extract_links). Long pages are cut; start_from_char continues."
    )
    action_type = BrowserGetContentAction
    acts = False
    read_only = True

    async def perform(self, action: BrowserGetContentAction) -> Result:
        page = await self.session.page()
        markdown: str = await page.evaluate(MARKDOWN_JS, action.extract_links)
        summary = await _page_summary(self.session, page)
        total, start, cap = len(markdown), action.start_from_char, self.settings.max_content_chars
        if start and start >= total:
            return Result(
                f"{summary}\nstart_from_char={start} is past the end of the content "
                f"({total} characters).",
                is_error=True,
            )
        end = min(total, start + cap)
        text = f"{summary}\n\n{markdown[start:end]}"
        saved: str | None = None
        if start or end < total:
            directory = self._output_dir()
            path = directory / f"content-{_stamp()}.md"
            await run_in_thread(path.write_text, markdown, "utf-8")
            saved = str(directory)
            more = f" Call again with start_from_char={end} for more." if end < total else ""
            text += (
                f"\n\n[Content cut: characters {start} to {end} of {total} shown.{more} "
                f"The whole text is in {path}.]"
            )
        return Result(text, full_output_save_dir=saved)


# -- acting on elements ----------------------------------------------------------------------


class BrowserClickTool(BrowserTool):
    name = "browser_click"
    description = (
        "Click the element with this index (from browser_get_state). With new_tab, a link "
        "opens in a new tab instead."
    )
    action_type = BrowserClickAction

    async def perform(self, action: BrowserClickAction) -> Result:
        page = await self.session.page()
        element = await _locate(page, action.index)
        timeout = self.settings.timeout
        if action.new_tab:
            href = await element.evaluate("el => (el.closest('a[href]') || {}).href || null")
            if href:
                tab_id, new_page = await self.session.new_tab()
                status = await _goto(new_page, href, timeout)
                return Result(
                    f"Opened the link in new tab {tab_id} (now current). {status}\n"
                    f"{await _page_summary(self.session, new_page)}"
                )
            note = await _settle_after(
                page, lambda: element.click(modifiers=["ControlOrMeta"]), timeout
            )
        else:
            note = await _settle_after(page, lambda: element.click(), timeout)
        lines = [f"Clicked element [{action.index}]."]
        if note:
            lines.append(note)
        popups = self.session.take_popups()
        if popups:
            current = self.session.switch(popups[-1])
            with contextlib.suppress(PlaywrightTimeoutError):
                await current.wait_for_load_state("load")
            lines.append(f"The click opened tab {', '.join(popups)}; tab {popups[-1]} is current.")
            page = current
        elif action.new_tab:
            lines.append("The element is not a link and no new tab opened.")
        lines.append(await _page_summary(self.session, page))
        return Result("\n".join(lines))


class BrowserTypeTool(BrowserTool):
    name = "browser_type"
    description = (
        "Put text into the input or textarea with this index (replacing what was there), or "
        "choose the option with that label in a select."
    )
    action_type = BrowserTypeAction

    async def perform(self, action: BrowserTypeAction) -> Result:
        page = await self.session.page()
        element = await _locate(page, action.index)
        tag = await element.evaluate("el => el.tagName.toLowerCase()")
        if tag == "select":
            # Looked up first: select_option waits for a missing option until the time limit.
            position = await element.evaluate(
                """(el, t) => Array.from(el.options).findIndex(
                    o => o.label === t || o.value === t || o.text.trim() === t)""",
                action.text,
            )
            if position < 0:
                options = await element.evaluate("el => Array.from(el.options, o => o.label)")
                raise ActionFailed(
                    f"Element [{action.index}] has no option {action.text!r}; its options are: "
                    + " | ".join(options)
                )
            await element.select_option(index=position)
            return Result(f"Chose {action.text!r} in element [{action.index}].")
        await element.fill(action.text)
        return Result(f"Typed {len(action.text)} characters into element [{action.index}].")


# -- tabs ------------------------------------------------------------------------------------


async def _tab_lines(session: BrowserSession) -> str:
    current = session.current_tab_id
    lines = []
    for tab_id, page in session.tabs().items():
        title = await page.title()
        mark = "*" if tab_id == current else " "
        lines.append(f"{mark} {tab_id}  {title or '(no title)'}  {_short(page.url)}")
    if not lines:
        return "No tabs are open."
    return "Tabs (* is current):\n" + "\n".join(lines)


class BrowserListTabsTool(BrowserTool):
    name = "browser_list_tabs"
    description = "List the open tabs: id, title, URL, and which is current."
    action_type = BrowserListTabsAction
    acts = False
    read_only = True

    async def perform(self, action: BrowserListTabsAction) -> Result:
        await self.session.page()
        return Result(await _tab_lines(self.session))


class BrowserSwitchTabTool(BrowserTool):
    name = "browser_switch_tab"
    description = "Make the tab with this id (from browser_list_tabs) the current one."
    action_type = BrowserSwitchTabAction

    async def perform(self, action: BrowserSwitchTabAction) -> Result:
        page = self.session.switch(action.tab_id)
        await page.bring_to_front()
        return Result(
            f"Switched to tab {action.tab_id}.\n{await _page_summary(self.session, page)}"
        )


class BrowserCloseTabTool(BrowserTool):
    name = "browser_close_tab"
    description = "Close the tab with this id (from browser_list_tabs)."
    action_type = BrowserCloseTabAction

    async def perform(self, action: BrowserCloseTabAction) -> Result:
        page = self.session.tabs().get(action.tab_id)
        if page is None:
            raise ActionFailed(
                f"No tab has id {action.tab_id!r}; open tabs: {', '.join(self.session.tabs())}."
            )
        await page.close()
        return Result(f"Closed tab {action.tab_id}.\n{await _tab_lines(self.session)}")


# -- storage ---------------------------------------------------------------------------------


class _Cookie(BaseModel):
    """A cookie as Playwright's add_cookies takes it (url, or domain with path)."""

    model_config = ConfigDict(extra="ignore")

    name: str
    value: str
    url: str | None = None
    domain: str | None = None
    path: str | None = None
    expires: float | None = None
    httpOnly: bool | None = None
    secure: bool | None = None
    sameSite: Literal["Lax", "None", "Strict"] | None = None


class _StorageItem(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    value: str


class _OriginStorage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    origin: str
    localStorage: list[_StorageItem] = []


class _StorageState(BaseModel):
    model_config = ConfigDict(extra="ignore")

    cookies: list[_Cookie] = []
    origins: list[_OriginStorage] = []


class BrowserGetStorageTool(BrowserTool):
    name = "browser_get_storage"
    description = (
        "Return this browser's cookies and localStorage as Playwright storage-state JSON, "
        "which browser_set_storage accepts (e.g. to carry a login over)."
    )
    action_type = BrowserGetStorageAction
    acts = False
    read_only = True

    async def perform(self, action: BrowserGetStorageAction) -> Result:
        state = await self.session.context.storage_state()
        return Result(
            "Storage state (cookies and localStorage by origin):\n" + json.dumps(state, indent=2)
        )


class BrowserSetStorageTool(BrowserTool):
    name = "browser_set_storage"
    description = (
        "Add cookies and localStorage to this browser from Playwright storage-state JSON "
        "(the shape browser_get_storage returns)."
    )
    action_type = BrowserSetStorageAction

    async def perform(self, action: BrowserSetStorageAction) -> Result:
        try:
            state = _StorageState.model_validate(action.storage_state)
        except ValidationError as exc:
            raise ActionFailed(f"storage_state is not a storage state: {exc}") from exc
        context = self.session.context
        if state.cookies:
            # Playwright types cookies as a TypedDict; _Cookie has checked these have its keys.
            cookies = [c.model_dump(exclude_none=True) for c in state.cookies]
            await context.add_cookies(cookies)  # type: ignore[arg-type]
        for origin in state.origins:
            if origin.localStorage:
                await self._set_local_storage(origin)
        items = sum(len(o.localStorage) for o in state.origins)
        return Result(
            f"Set {len(state.cookies)} cookies and {items} localStorage items "
            f"for {len(state.origins)} origins."
        )

    async def _set_local_storage(self, origin: _OriginStorage) -> None:
        """localStorage can only be written from a page of its origin: open one in a scratch
        tab whose requests are answered locally, so nothing reaches the site."""
        page = await self.session.scratch_page()

        async def blank(route: Route) -> None:
            await route.fulfill(status=200, content_type="text/html", body="<html></html>")

        try:
            await page.route("**/*", blank)
            await page.goto(origin.origin.rstrip("/") + "/", wait_until="load")
            await page.evaluate(
                "items => { for (const i of items) localStorage.setItem(i.name, i.value); }",
                [i.model_dump() for i in origin.localStorage],
            )
        finally:
            await page.close()


# -- recording -------------------------------------------------------------------------------


class BrowserStartRecordingTool(BrowserTool):
    name = "browser_start_recording"
    description = (
        "Start recording this browser (a Playwright trace with screenshots and DOM "
        "snapshots of every step); browser_stop_recording saves it."
    )
    action_type = BrowserStartRecordingAction

    async def perform(self, action: BrowserStartRecordingAction) -> Result:
        if self.session.recording:
            raise ActionFailed("A recording is already running; stop it first.")
        await self.session.page()
        await self.session.context.tracing.start(screenshots=True, snapshots=True)
        self.session.recording = True
        return Result("Recording started.")


class BrowserStopRecordingTool(BrowserTool):
    name = "browser_stop_recording"
    description = "Stop the recording and save it as a trace zip in the workspace."
    action_type = BrowserStopRecordingAction

    async def perform(self, action: BrowserStopRecordingAction) -> Result:
        if not self.session.recording:
            raise ActionFailed("No recording is running; start one with browser_start_recording.")
        directory = self.ctx.working_dir / ".browser_recordings"
        await run_in_thread(lambda: directory.mkdir(parents=True, exist_ok=True))
        path = directory / f"recording-{_stamp()}.zip"
        self.session.recording = False
        await self.session.context.tracing.stop(path=str(path))
        size = (await run_in_thread(path.stat)).st_size
        return Result(
            f"Recording saved to {path} ({size} bytes). View it with "
            f"`playwright show-trace {path}`."
        )


TOOL_TYPES: tuple[type[BrowserTool], ...] = (
    BrowserNavigateTool,
    BrowserClickTool,
    BrowserTypeTool,
    BrowserGetStateTool,
    BrowserGetContentTool,
    BrowserScrollTool,
    BrowserGoBackTool,
    BrowserListTabsTool,
    BrowserSwitchTabTool,
    BrowserCloseTabTool,
    BrowserGetStorageTool,
    BrowserSetStorageTool,
    BrowserStartRecordingTool,
    BrowserStopRecordingTool,
)
