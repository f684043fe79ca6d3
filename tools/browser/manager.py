"""One Chromium process for the whole server: started on first use, replaced when it dies,
closed when idle and at shutdown.

A Chromium costs ~150 MB before the first page, so conversations share one process and each
gets its own BrowserContext (cookies, storage and tabs isolated, like separate profiles).
The process is owned by a `BrowserManager` that the server makes and hands to every
conversation's tools through their ToolContext; nothing keeps a Chromium running once the
manager is closed: Playwright
launches Chromium in its own process group and kills that group when the browser or its
driver goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, Playwright, async_playwright
from pydantic import BaseModel, ConfigDict, Field

from core.processes import find_process, group_members

logger = logging.getLogger(__name__)

#: Flags that make Debian's Chromium work in a sandbox without network: without the
#: background-networking ones it keeps dialling Google, and the closed network refuses it.
CHROMIUM_FLAGS: tuple[str, ...] = (
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)

#: Seconds allowed on top of launch_timeout for starting Playwright's driver process.
DRIVER_START_SLACK = 15.0


# -- exceptions ------------------------------------------------------------------------------
#
#   BrowserError
#   ├── BrowserLaunchError   Chromium would not start (path, reason)
#   └── ManagerClosedError   the manager was closed for good


class BrowserError(Exception):
    """Base of the browser manager's failures."""


class BrowserLaunchError(BrowserError):
    """Chromium could not be started; `executable` and `reason` say which and why."""

    def __init__(self, executable: str, reason: str) -> None:
        super().__init__(f"could not start Chromium at {executable}: {reason}")
        self.executable = executable
        self.reason = reason


class ManagerClosedError(BrowserError):
    """The manager was closed (server shutting down); it starts no new browser."""


# -- settings and state ----------------------------------------------------------------------


#: Debian's Chromium; the server's configuration (AGENT_SERVER_CHROMIUM) may name another.
DEFAULT_EXECUTABLE = "/usr/bin/chromium"


class BrowserSettings(BaseModel):
    """How the shared Chromium is started and when it is let go."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    executable: str = Field(
        default=DEFAULT_EXECUTABLE,
        description="Chromium binary (the server passes its configured one). "
        "Playwright's own browser download is never used.",
    )
    idle_timeout: float = Field(
        default=300.0,
        gt=0,
        description="Seconds without any browser call after which Chromium is closed to give "
        "its memory back; the next call starts a new one.",
    )
    launch_timeout: float = Field(
        default=30.0, gt=0, description="Seconds Chromium may take to start."
    )
    extra_args: tuple[str, ...] = Field(
        default=(), description="More Chromium switches, after CHROMIUM_FLAGS."
    )


class ManagerState(Enum):
    """STOPPED: no Chromium (never started, idle-closed or crashed); RUNNING: one is up;
    CLOSED: the owner closed the manager and it starts nothing any more."""

    STOPPED = "stopped"
    RUNNING = "running"
    CLOSED = "closed"


class EndReason(StrEnum):
    """Why a browser generation ended, as the agent is told."""

    CRASHED = "crashed or was killed"
    IDLE = "was closed after a period without use"
    CLOSED = "was closed"


@dataclass(frozen=True)
class Lease:
    """A running browser handed to one call; `generation` counts launches, so a context
    made under an older generation is known to be gone."""

    browser: Browser
    generation: int


# -- the manager -----------------------------------------------------------------------------


class BrowserManager:
    """Owns the shared Chromium: lazy start, crash replacement, idle close, final close."""

    def __init__(self, settings: BrowserSettings | None = None) -> None:
        self.settings = settings or BrowserSettings()
        self.state = ManagerState.STOPPED
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._generation = 0
        self._ended: dict[int, EndReason] = {}
        self._disconnected: dict[int, asyncio.Event] = {}
        self._starting: asyncio.Task[Lease] | None = None
        self._idle_task: asyncio.Task[None] | None = None
        self._in_flight = 0
        self._last_used = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: A switch Chromium ignores, unique per manager, to find our process in /proc.
        self.marker = f"--agent-server-browser={secrets.token_hex(6)}"

    # -- what callers use --------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[Lease]:
        """A running browser for the duration of one call; the idle clock stops meanwhile."""
        lease = await self._acquire()
        self._in_flight += 1
        try:
            yield lease
        finally:
            self._in_flight -= 1
            self._last_used = time.monotonic()

    def end_reason(self, generation: int) -> EndReason | None:
        """Why `generation` ended, or None while it runs."""
        return self._ended.get(generation)

    async def wait_disconnected(self, generation: int, timeout: float) -> bool:
        """Whether `generation` is gone, waiting up to `timeout` s for Playwright to notice:
        a call may fail on a dead pipe a moment before the disconnect event arrives."""
        if generation in self._ended:
            return True
        event = self._disconnected.get(generation)
        if event is None:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
        return generation in self._ended

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def pid(self) -> int | None:
        """Pid of the running Chromium's main process (found by our marker switch)."""
        if self._browser is None:
            return None
        return find_process(self.marker)

    def process_ids(self) -> list[int]:
        """Every process of the running Chromium: the main one and its process group
        (Chromium's helpers join the group of its main process, which Playwright starts as a
        group leader)."""
        pid = self.pid
        return [] if pid is None else group_members(pid)

    async def close(self) -> None:
        """Close Chromium and the Playwright driver for good (server shutdown)."""
        if self.state is ManagerState.CLOSED:
            return
        self.state = ManagerState.CLOSED
        if self._starting is not None and not self._starting.done():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._starting
        await self._stop(EndReason.CLOSED)

    # -- lifecycle ---------------------------------------------------------------------

    def _check_loop(self) -> None:
        """Playwright's objects belong to the loop that started them; a manager used from a
        new loop (the old one finished, as between test modules) forgets them. The orphaned
        driver ends when its pipe closes, at the latest when this process exits, and takes
        its browser with it; the server itself runs one loop and never gets here."""
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop and not self._loop.is_closed():
            raise BrowserError("this browser manager belongs to another running event loop")
        if self._loop is not None and self._loop is not loop:
            self._playwright = None
            self._browser = None
            self._starting = None
            self._idle_task = None
            if self.state is ManagerState.RUNNING:
                self.state = ManagerState.STOPPED
        self._loop = loop

    async def _acquire(self) -> Lease:
        self._check_loop()
        if self.state is ManagerState.CLOSED:
            raise ManagerClosedError("the browser manager is closed")
        browser = self._browser
        if browser is not None and browser.is_connected():
            return Lease(browser, self._generation)
        if self._starting is None or self._starting.done():
            # A task, shielded below: a caller that times out or is cancelled mid-launch must
            # not orphan a half-started Chromium; the next caller picks up the result.
            self._starting = asyncio.create_task(self._launch())
            self._starting.add_done_callback(retrieve_exception)
        # Playwright bounds the launch itself; the slack covers starting its driver.
        limit = self.settings.launch_timeout + DRIVER_START_SLACK
        try:
            return await asyncio.wait_for(asyncio.shield(self._starting), limit)
        except TimeoutError as exc:
            raise BrowserLaunchError(
                self.settings.executable, f"Chromium did not start within {limit:.0f} s"
            ) from exc

    async def _launch(self) -> Lease:
        if self._browser is not None:
            self._record_end(self._generation, EndReason.CRASHED)
            self._browser = None
        try:
            if self._playwright is None:
                self._playwright = await async_playwright().start()
            browser = await self._launch_browser(self._playwright)
        except BrowserLaunchError:
            await self._stop_driver()
            raise
        except Exception as exc:  # the driver itself may be gone: start afresh next time
            await self._stop_driver()
            raise BrowserLaunchError(self.settings.executable, str(exc)) from exc
        if self.state is ManagerState.CLOSED:
            with contextlib.suppress(Exception):
                await browser.close()
            await self._stop_driver()
            raise ManagerClosedError("the browser manager was closed while Chromium started")
        self._generation += 1
        generation = self._generation
        self._browser = browser
        self._disconnected[generation] = asyncio.Event()
        browser.on("disconnected", lambda _b: self._on_disconnected(generation))
        self.state = ManagerState.RUNNING
        self._last_used = time.monotonic()
        if self._idle_task is None or self._idle_task.done():
            self._idle_task = asyncio.create_task(self._watch_idle())
        logger.info("Chromium %s started (generation %d)", browser.version, generation)
        return Lease(browser, generation)

    async def _launch_browser(self, playwright: Playwright) -> Browser:
        executable = self.settings.executable
        if not Path(executable).exists():
            raise BrowserLaunchError(executable, "no such file (set AGENT_SERVER_CHROMIUM)")
        as_root = os.geteuid() == 0
        args = [*CHROMIUM_FLAGS, *self.settings.extra_args, self.marker]
        timeout_ms = self.settings.launch_timeout * 1000
        try:
            return await playwright.chromium.launch(
                executable_path=executable,
                headless=True,
                # Chromium refuses its sandbox as root; elsewhere keep it.
                chromium_sandbox=not as_root,
                args=[*args, "--no-sandbox"] if as_root else args,
                timeout=timeout_ms,
            )
        except Exception as exc:
            if as_root:
                raise BrowserLaunchError(executable, str(exc).splitlines()[0]) from exc
            # Containers often lack the user namespaces the sandbox needs.
            logger.warning("Chromium would not start sandboxed (%s); retrying without", exc)
            try:
                return await playwright.chromium.launch(
                    executable_path=executable,
                    headless=True,
                    chromium_sandbox=False,
                    args=[*args, "--no-sandbox"],
                    timeout=timeout_ms,
                )
            except Exception as exc2:
                raise BrowserLaunchError(executable, str(exc2).splitlines()[0]) from exc2

    def _on_disconnected(self, generation: int) -> None:
        self._record_end(generation, EndReason.CRASHED)
        if generation == self._generation and self.state is ManagerState.RUNNING:
            self._browser = None
            self.state = ManagerState.STOPPED
            logger.warning("Chromium (generation %d) went away", generation)

    def _record_end(self, generation: int, reason: EndReason) -> None:
        self._ended.setdefault(generation, reason)
        event = self._disconnected.get(generation)
        if event is not None:
            event.set()

    async def _watch_idle(self) -> None:
        idle = self.settings.idle_timeout
        while self.state is ManagerState.RUNNING:
            wait = self._last_used + idle - time.monotonic()
            if wait > 0 or self._in_flight:
                await asyncio.sleep(max(wait, 1.0) if self._in_flight else wait)
                continue
            logger.info("Chromium idle for %.0f s; closing it", idle)
            await self._stop(EndReason.IDLE, from_watcher=True)
            return

    async def _stop(self, reason: EndReason, *, from_watcher: bool = False) -> None:
        if not from_watcher and self._idle_task is not None:
            self._idle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._idle_task
        self._idle_task = None
        # Detach both before awaiting, so a call arriving meanwhile launches afresh instead
        # of using a driver that is about to stop.
        browser, self._browser = self._browser, None
        playwright, self._playwright = self._playwright, None
        if self.state is ManagerState.RUNNING:
            self.state = ManagerState.STOPPED
        if browser is not None:
            self._record_end(self._generation, reason)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(browser.close(), 10)
        if playwright is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(playwright.stop(), 10)

    async def _stop_driver(self) -> None:
        playwright, self._playwright = self._playwright, None
        if playwright is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(playwright.stop(), 10)


def retrieve_exception(task: asyncio.Task[Any]) -> None:
    """Mark a shielded task's failure as seen: its caller may have been cancelled, and the
    failure is reported to whoever awaits the task next, not logged as lost."""
    if not task.cancelled():
        task.exception()
