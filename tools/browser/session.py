"""One conversation's browser: its own BrowserContext in the shared Chromium, its tabs, and
the guard every call goes through (one call at a time, a time limit, crash recovery).

The context is made on the first call, not when the conversation starts, so conversations
that never browse cost nothing. When the shared Chromium dies or is idle-closed, the next
call gets a fresh context and the agent is told that its tabs and cookies are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from playwright.async_api import BrowserContext, Page
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from tools.browser.manager import (
    BrowserError,
    BrowserManager,
    EndReason,
    Lease,
    retrieve_exception,
)

T = TypeVar("T")

#: Most seconds the guard adds to the per-call limit (never more than the limit itself), so
#: Playwright's own timeouts (which carry a better message) fire first and the guard only
#: catches what has none (an evaluate on a page stuck in a loop).
GUARD_GRACE = 5.0

#: How long a failed call waits for Playwright to report a dead browser before deciding it
#: was an ordinary failure.
DISCONNECT_WAIT = 2.0


class ActionFailed(Exception):
    """An action could not be done for a reason the agent can act on (stale index, no such
    tab); `message` is told to the agent as is."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class Outcome(Generic[T]):
    """What a guarded call gives back: a value or an error message, plus notes the agent
    must hear either way (the browser was restarted, a tab crashed)."""

    value: T | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)


def describe_error(exc: BaseException) -> str:
    """Playwright's message without the call log it appends."""
    text = str(exc).split("\nCall log:", 1)[0].strip()
    return text or type(exc).__name__


def _looks_closed(exc: PlaywrightError) -> bool:
    text = str(exc)
    return "closed" in text or "crashed" in text or "disconnected" in text


class BrowserSession:
    """A conversation's isolated browser state inside the shared Chromium."""

    def __init__(self, manager: BrowserManager, *, timeout: float) -> None:
        self.manager = manager
        self.timeout = timeout
        self._lock = asyncio.Lock()
        self._context: BrowserContext | None = None
        self._generation = 0
        self._context_lost = False
        self._opening: asyncio.Task[BrowserContext] | None = None
        self._tabs: dict[str, Page] = {}
        self._current: str | None = None
        self._popups: list[str] = []
        self._notes: list[str] = []
        self.recording = False
        self.closed = False

    # -- the guard ---------------------------------------------------------------------

    async def call(self, op: Callable[[], Awaitable[T]]) -> Outcome[T]:
        """Run `op` against this conversation's context, within the time limit.

        Failures come back as `Outcome.error` rather than exceptions: the agent should read
        what went wrong and carry on, and nothing here may hang the conversation. Starting
        Chromium is not counted against the limit (the manager bounds it with its own
        launch timeout): a slow start on a busy machine is no fault of the page.
        """
        if self.closed:
            return Outcome(error="This conversation's browser has been closed.")
        limit = self.timeout + min(GUARD_GRACE, self.timeout)
        async with self._lock:
            notes: list[str] = []
            try:
                value = await self._attempt(op, notes, limit)
                return Outcome(value=value, notes=self._drain(notes))
            except TimeoutError:
                return Outcome(
                    error=f"The browser did not answer within {limit:.0f} s; the page may "
                    "be busy. Try again, navigate elsewhere or close the tab.",
                    notes=self._drain(notes),
                )
            except ActionFailed as exc:
                return Outcome(error=exc.message, notes=self._drain(notes))
            except PlaywrightTimeoutError as exc:
                return Outcome(
                    error=f"Timed out after {self.timeout:.0f} s: {describe_error(exc)}",
                    notes=self._drain(notes),
                )
            except (PlaywrightError, BrowserError) as exc:
                return Outcome(error=describe_error(exc), notes=self._drain(notes))

    def _drain(self, notes: list[str]) -> list[str]:
        out = [*notes, *self._notes]
        self._notes.clear()
        return out

    async def _attempt(self, op: Callable[[], Awaitable[T]], notes: list[str], limit: float) -> T:
        for attempt in (1, 2):
            async with self.manager.use() as lease:
                try:
                    await asyncio.wait_for(self._ensure_context(lease, notes), limit)
                    return await asyncio.wait_for(op(), limit)
                except PlaywrightError as exc:
                    # A browser killed between calls is often only noticed by the call that
                    # hits the dead pipe (opening a context on it, or the action itself);
                    # retrying once on the new browser is safe because the dead one carried
                    # out nothing.
                    if (
                        attempt == 1
                        and _looks_closed(exc)
                        and await self.manager.wait_disconnected(lease.generation, DISCONNECT_WAIT)
                    ):
                        continue
                    raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _ensure_context(self, lease: Lease, notes: list[str]) -> None:
        if (
            self._context is not None
            and self._generation == lease.generation
            and not self._context_lost
        ):
            return
        if self._context is not None:
            if self._context_lost and self._generation == lease.generation:
                # A killed browser's contexts report closing a moment before the browser's
                # own disconnect: wait for it, so the note says why and the call is retried
                # on the new browser (opening a context on the dead one fails as "closed").
                await self.manager.wait_disconnected(lease.generation, DISCONNECT_WAIT)
            reason = self.manager.end_reason(self._generation)
            what = reason.value if reason is not None else EndReason.CLOSED.value
            lost = "tabs, cookies and storage"
            if self.recording:
                lost += ", and the recording in progress,"
            notes.append(
                f"Note: the browser {what} and has been restarted; this conversation's earlier "
                f"{lost} are gone."
            )
            if reason is None:
                with contextlib.suppress(PlaywrightError):
                    await self._context.close()
            self._forget_context()
        if self._opening is None or self._opening.done():
            self._opening = asyncio.create_task(self._open_context(lease))
            self._opening.add_done_callback(retrieve_exception)
        # Shielded: a call cancelled mid-way must not leave a context nobody will close.
        context = await asyncio.shield(self._opening)
        self._opening = None
        self._context = context
        self._generation = lease.generation
        self._context_lost = False

    async def _open_context(self, lease: Lease) -> BrowserContext:
        context = await lease.browser.new_context(viewport={"width": 1280, "height": 800})
        context.set_default_timeout(self.timeout * 1000)
        context.set_default_navigation_timeout(self.timeout * 1000)
        context.on("page", self._on_page)
        context.on("close", lambda _c: self._on_context_close(context))
        return context

    def _on_context_close(self, context: BrowserContext) -> None:
        if context is self._context:
            self._context_lost = True

    def _forget_context(self) -> None:
        self._context = None
        self._tabs.clear()
        self._popups.clear()
        self._current = None
        self.recording = False

    # -- tabs --------------------------------------------------------------------------

    @property
    def context(self) -> BrowserContext:
        if self._context is None:
            raise ActionFailed("The browser is not open.")
        return self._context

    def _tab_id(self, page: Page) -> str | None:
        for tab_id, known in self._tabs.items():
            if known is page:
                return tab_id
        return None

    def _register(self, page: Page) -> str:
        existing = self._tab_id(page)
        if existing is not None:
            return existing
        tab_id = secrets.token_hex(2)
        while tab_id in self._tabs:
            tab_id = secrets.token_hex(2)
        self._tabs[tab_id] = page
        page.on("close", lambda _p: self._on_page_close(tab_id))
        page.on("crash", lambda _p: self._notes.append(f"Note: the page in tab {tab_id} crashed."))
        return tab_id

    def _on_page(self, page: Page) -> None:
        """Pages the site opened (target=_blank, window.open) become tabs too."""
        if self._tab_id(page) is None:
            self._popups.append(self._register(page))

    def _on_page_close(self, tab_id: str) -> None:
        self._tabs.pop(tab_id, None)
        if tab_id in self._popups:
            self._popups.remove(tab_id)

    def take_popups(self) -> list[str]:
        """Tabs the site opened since the last look, oldest first."""
        popups = [t for t in self._popups if t in self._tabs]
        self._popups.clear()
        return popups

    async def new_tab(self) -> tuple[str, Page]:
        """A blank tab, made current."""
        page = await self.context.new_page()
        tab_id = self._register(page)
        if tab_id in self._popups:
            self._popups.remove(tab_id)
        self._current = tab_id
        return tab_id, page

    async def scratch_page(self) -> Page:
        """A page for the tool's own use (applying storage); never listed as a tab."""
        page = await self.context.new_page()
        tab_id = self._tab_id(page)
        if tab_id is not None:
            self._tabs.pop(tab_id, None)
            if tab_id in self._popups:
                self._popups.remove(tab_id)
        return page

    async def page(self) -> Page:
        """The current tab's page; a blank tab when none is open."""
        tab_id = self.current_tab_id
        if tab_id is not None:
            return self._tabs[tab_id]
        return (await self.new_tab())[1]

    def _prune(self) -> None:
        for tab_id, page in list(self._tabs.items()):
            if page.is_closed():
                self._tabs.pop(tab_id, None)

    @property
    def current_tab_id(self) -> str | None:
        """The current tab, falling back to the newest open one when it was closed."""
        self._prune()
        if self._current not in self._tabs:
            self._current = next(reversed(self._tabs), None)
        return self._current

    def tabs(self) -> dict[str, Page]:
        """Open tabs by id, in the order they were opened."""
        self._prune()
        return dict(self._tabs)

    def switch(self, tab_id: str) -> Page:
        page = self._tabs.get(tab_id)
        if page is None or page.is_closed():
            raise ActionFailed(f"No tab has id {tab_id!r}; open tabs: {', '.join(self.tabs())}.")
        self._current = tab_id
        return page

    # -- closing -----------------------------------------------------------------------

    async def close(self) -> None:
        """Close this conversation's context; the shared Chromium stays for the others.

        Deliberately not under the call lock: a call stuck on a hung page must not delay
        closing, and closing the context makes that call fail at once.
        """
        if self.closed:
            return
        self.closed = True
        opening, self._opening = self._opening, None
        if opening is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                opened = await asyncio.wait_for(asyncio.shield(opening), self.timeout)
                if opened is not self._context:
                    await asyncio.wait_for(opened.close(), 10)
        context = self._context
        self._forget_context()
        if context is not None and self.manager.end_reason(self._generation) is None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(context.close(), 10)
