"""The console as a user's browser sees it: a user made, a page signed in, and what went
wrong on the page (script errors, CSP violations). Shared by the console's test modules."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from playwright.sync_api import Browser, ConsoleMessage, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.control_plane.support import ControlPlane

# What a page does by itself (its modules run, a render, an answer of the API) took more than
# Playwright's 5 s default on a loaded two-core machine: the first sign-in page, once.
expect.set_options(timeout=20_000)


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


def opened(page: Page, plane: ControlPlane) -> None:
    """The console loaded in `page` up to its sign-in form."""
    failed: list[str] = []
    page.on("requestfailed", lambda request: failed.append(f"{request.url}: {request.failure}"))
    page.on(
        "response", lambda r: failed.append(f"{r.url}: {r.status}") if r.status >= 400 else None
    )
    for _ in range(3):
        failed.clear()
        page.goto(plane.url + "/")  # its modules loaded (or failed) once it returns
        # Chromium drops what is in flight when this host's interfaces change (other tests
        # make namespaces, bridges and containers): the page is loaded again, as a person
        # would reload it.
        if not any("ERR_NETWORK_CHANGED" in failure for failure in failed):
            break
    try:  # the console's modules load and run: seconds on a loaded machine
        page.get_by_label("Account key").wait_for(timeout=60_000)
    except PlaywrightTimeoutError:
        raise AssertionError(
            f"no sign-in form; failed requests {failed}, the page: {page.content()[:2000]}"
        ) from None


def signed_in(browser: Browser, plane: ControlPlane, api_key: str) -> tuple[Page, list[str]]:
    """A new browser context's page, signed in with `api_key`, and its problems (`watch`)."""
    page = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
    page.set_default_timeout(20_000)
    problems = watch(page)
    opened(page, plane)
    page.get_by_label("Account key").fill(api_key)
    page.get_by_role("button", name="Sign in").click()
    return page, problems
