"""A browser's storage state (cookies and localStorage by origin) in Playwright's shape, and
writing localStorage into it, for browser_get_storage and browser_set_storage."""

from __future__ import annotations

from typing import Literal

from playwright.async_api import Route
from pydantic import BaseModel, ConfigDict

from tools.browser.session import BrowserSession


class Cookie(BaseModel):
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


class StorageItem(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    value: str


class OriginStorage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    origin: str
    localStorage: list[StorageItem] = []


class StorageState(BaseModel):
    model_config = ConfigDict(extra="ignore")

    cookies: list[Cookie] = []
    origins: list[OriginStorage] = []


async def set_local_storage(session: BrowserSession, origin: OriginStorage) -> None:
    """localStorage can only be written from a page of its origin: open one in a scratch
    tab whose requests are answered locally, so nothing reaches the site."""
    page = await session.scratch_page()

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
