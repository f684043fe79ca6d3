"""browser_tool_set: a real Chromium the agent drives with numbered elements.

Layout: `manager` owns the one Chromium process the server shares, `session` is one
conversation's isolated context and tabs, `scripts` is the JavaScript run in pages, `base` the
tools' settings and guard, `pages` what they do to a page, `storage` the storage state's shape,
and `tools` the fourteen tools. Their Action/Observation kinds are the schema's
(`events.tools.browser`).

`TOOL_SET.make(ctx, params)` takes BrowserToolParams (`timeout`, `max_content_chars`); the
server's BrowserManager comes from `ctx.browser` (made on first need by whoever built the
context). No browser starts until a tool is first called.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from typing import Any

from events.tools.browser import ACTION_TYPES, BrowserObservation
from tools.base import Tool, ToolContext, ToolSet

logger = logging.getLogger(__name__)

#: Loaded on first use: Playwright is not imported until a browser is wanted.
_LAZY = {
    "BrowserError": "tools.browser.manager",
    "BrowserLaunchError": "tools.browser.manager",
    "BrowserManager": "tools.browser.manager",
    "BrowserSettings": "tools.browser.manager",
    "ManagerClosedError": "tools.browser.manager",
    "BrowserSession": "tools.browser.session",
    "BrowserToolParams": "tools.browser.base",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tools.browser' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def make(ctx: ToolContext, params: Mapping[str, Any]) -> list[Tool]:
    """The conversation's fourteen tools, sharing one session (context made on first use)."""
    from tools.browser.base import BrowserToolParams
    from tools.browser.session import BrowserSession
    from tools.browser.tools import TOOL_TYPES

    if ctx.browser is None:
        raise ValueError("browser_tool_set needs ctx.browser: the server's BrowserManager")
    manager = ctx.browser()
    settings = BrowserToolParams.model_validate(params)
    ignored = sorted(k for k in params if k not in BrowserToolParams.model_fields)
    if ignored:
        logger.warning("browser_tool_set ignores unknown params: %s", ", ".join(ignored))
    session = BrowserSession(manager, timeout=settings.timeout)
    return [tool(ctx, params, session) for tool in TOOL_TYPES]


TOOL_SET = ToolSet(
    name="browser_tool_set",
    make=make,
    action_types=ACTION_TYPES,
    observation_types=(BrowserObservation,),
)

__all__ = [
    "TOOL_SET",
    "BrowserError",
    "BrowserLaunchError",
    "BrowserManager",
    "BrowserSession",
    "BrowserSettings",
    "BrowserToolParams",
    "ManagerClosedError",
    "make",
]
