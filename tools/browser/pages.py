"""What the browser tools do to a page: load it, click and wait for what the click started,
find a numbered element, and describe the page, its tabs and its URLs for the model."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from playwright.async_api import Frame, Locator, Page, Request
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from tools.browser.scripts import INDEX_ELEMENTS_JS, PageIndex, index_arguments, index_selector
from tools.browser.session import ActionFailed, BrowserSession

#: Seconds a click is given to start a navigation before it is taken to have none.
NAVIGATION_START_WINDOW = 0.5

#: Most elements one get_state numbers; a page with more is summarised.
MAX_ELEMENTS = 400


def stamp() -> str:
    """The time in a saved file's name (screenshots, page text, recordings)."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def normalize_url(url: str) -> str:
    """Bare hosts get a scheme, as a browser's address bar would add one."""
    url = url.strip()
    if "://" in url or url.startswith(("about:", "data:", "javascript:")):
        return url
    local = url.startswith(("localhost", "127.", "[::1]", "0.0.0.0"))
    return ("http://" if local else "https://") + url


def short_url(url: str, limit: int = 300) -> str:
    """URLs as shown to the model: a data: URL can be a whole page long."""
    return url if len(url) <= limit else url[: limit - 1] + "\u2026"


async def page_summary(session: BrowserSession, page: Page) -> str:
    tab_id = session.current_tab_id
    title = await page.title()
    return f"URL: {short_url(page.url)}\nTitle: {title}\nTab: {tab_id} ({len(session.tabs())} open)"


async def goto(page: Page, url: str, timeout: float) -> str:
    """Load `url`; when the load does not finish in time, say so and keep what loaded."""
    try:
        response = await page.goto(url, wait_until="load")
    except PlaywrightTimeoutError:
        return (
            f"The page did not finish loading within {timeout:.0f} s; what follows is what "
            "had loaded by then."
        )
    if response is not None and response.status >= 400:
        return f"Opened {short_url(page.url)}, which answered HTTP {response.status}."
    return f"Opened {short_url(page.url)}."


async def settle_after(page: Page, action: Callable[[], Awaitable[None]], timeout: float) -> str:
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


async def locate(page: Page, index: int) -> Locator:
    """The element `index` of the last numbering pass, or a clear error with fresh numbers."""
    locator = page.locator(index_selector(index))
    if await locator.count():
        return locator.first
    fresh = await index_page(page)
    raise ActionFailed(
        f"No element has index {index} now: the page changed since the numbers were given "
        f"(or browser_get_state was not called yet). The elements now are:\n{fresh.describe()}"
    )


async def index_page(page: Page) -> PageIndex:
    raw = await page.evaluate(INDEX_ELEMENTS_JS, index_arguments(MAX_ELEMENTS))
    return PageIndex.model_validate(raw)


async def tab_lines(session: BrowserSession) -> str:
    current = session.current_tab_id
    lines = []
    for tab_id, page in session.tabs().items():
        title = await page.title()
        mark = "*" if tab_id == current else " "
        lines.append(f"{mark} {tab_id}  {title or '(no title)'}  {short_url(page.url)}")
    if not lines:
        return "No tabs are open."
    return "Tabs (* is current):\n" + "\n".join(lines)
