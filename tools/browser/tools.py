"""The fourteen browser tools: each turns its Action into calls on the conversation's
BrowserSession and describes the result for the model.

What they do to a page is in `pages`, their base (settings, guard) in `base`, the storage
state's shape in `storage`.
"""

from __future__ import annotations

import base64
import contextlib
import json

from playwright.async_api import TimeoutError as PlaywrightTimeoutError
from pydantic import ValidationError

from events.tools.browser import (
    BrowserClickAction,
    BrowserCloseTabAction,
    BrowserGetContentAction,
    BrowserGetStateAction,
    BrowserGetStorageAction,
    BrowserGoBackAction,
    BrowserListTabsAction,
    BrowserNavigateAction,
    BrowserScrollAction,
    BrowserSetStorageAction,
    BrowserStartRecordingAction,
    BrowserStopRecordingAction,
    BrowserSwitchTabAction,
    BrowserTypeAction,
)
from tools.base import run_in_thread
from tools.browser.base import BrowserTool, Result
from tools.browser.pages import (
    goto,
    index_page,
    locate,
    normalize_url,
    page_summary,
    settle_after,
    stamp,
    tab_lines,
)
from tools.browser.scripts import MARKDOWN_JS
from tools.browser.session import ActionFailed
from tools.browser.storage import StorageState, set_local_storage

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
        status = await goto(page, normalize_url(action.url), self.settings.timeout)
        return Result(f"{status}\n{await page_summary(self.session, page)}")


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
                f"\n{await page_summary(self.session, page)}"
            )
        if response is None and page.url == before:
            return Result("There is no earlier page in this tab's history.", is_error=True)
        return Result(f"Went back.\n{await page_summary(self.session, page)}")


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
        index = await index_page(page)
        text = f"{await page_summary(self.session, page)}\n{index.describe()}"
        images: list[str] = []
        if action.include_screenshot:
            png = await page.screenshot(type="png")
            path = self._output_dir() / f"screenshot-{stamp()}.png"
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
        summary = await page_summary(self.session, page)
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
            path = directory / f"content-{stamp()}.md"
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
        element = await locate(page, action.index)
        timeout = self.settings.timeout
        if action.new_tab:
            href = await element.evaluate("el => (el.closest('a[href]') || {}).href || null")
            if href:
                tab_id, new_page = await self.session.new_tab()
                status = await goto(new_page, href, timeout)
                return Result(
                    f"Opened the link in new tab {tab_id} (now current). {status}\n"
                    f"{await page_summary(self.session, new_page)}"
                )
            note = await settle_after(
                page, lambda: element.click(modifiers=["ControlOrMeta"]), timeout
            )
        else:
            note = await settle_after(page, lambda: element.click(), timeout)
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
        lines.append(await page_summary(self.session, page))
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
        element = await locate(page, action.index)
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


class BrowserListTabsTool(BrowserTool):
    name = "browser_list_tabs"
    description = "List the open tabs: id, title, URL, and which is current."
    action_type = BrowserListTabsAction
    acts = False
    read_only = True

    async def perform(self, action: BrowserListTabsAction) -> Result:
        await self.session.page()
        return Result(await tab_lines(self.session))


class BrowserSwitchTabTool(BrowserTool):
    name = "browser_switch_tab"
    description = "Make the tab with this id (from browser_list_tabs) the current one."
    action_type = BrowserSwitchTabAction

    async def perform(self, action: BrowserSwitchTabAction) -> Result:
        page = self.session.switch(action.tab_id)
        await page.bring_to_front()
        return Result(f"Switched to tab {action.tab_id}.\n{await page_summary(self.session, page)}")


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
        return Result(f"Closed tab {action.tab_id}.\n{await tab_lines(self.session)}")


# -- storage ---------------------------------------------------------------------------------


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
            state = StorageState.model_validate(action.storage_state)
        except ValidationError as exc:
            raise ActionFailed(f"storage_state is not a storage state: {exc}") from exc
        context = self.session.context
        if state.cookies:
            # Playwright types cookies as a TypedDict; storage.Cookie has checked these have its
            # keys.
            cookies = [c.model_dump(exclude_none=True) for c in state.cookies]
            await context.add_cookies(cookies)  # type: ignore[arg-type]
        for origin in state.origins:
            if origin.localStorage:
                await set_local_storage(self.session, origin)
        items = sum(len(o.localStorage) for o in state.origins)
        return Result(
            f"Set {len(state.cookies)} cookies and {items} localStorage items "
            f"for {len(state.origins)} origins."
        )


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
        path = directory / f"recording-{stamp()}.zip"
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
