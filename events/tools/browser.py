"""browser_tool_set: the browser's Action kinds and its one Observation kind, shaped like
OpenHands' own."""

from __future__ import annotations

from typing import Any, Literal, TypeAlias, get_args

from pydantic import Field

from events.tools.base import Action, Observation


class BrowserAction(Action):
    """The generic browser action the SPEC lists; no tool takes it (each tool has its own
    kind below), but events may carry it, so the schema knows it."""

    kind: Literal["BrowserAction"] = "BrowserAction"


class BrowserNavigateAction(Action):
    kind: Literal["BrowserNavigateAction"] = "BrowserNavigateAction"
    url: str = Field(description="The URL to open (http://, https://, file:// or data:).")
    new_tab: bool = Field(
        default=False, description="Open it in a new tab instead of the current one."
    )


class BrowserClickAction(Action):
    kind: Literal["BrowserClickAction"] = "BrowserClickAction"
    index: int = Field(ge=0, description="Index of the element, as browser_get_state lists it.")
    new_tab: bool = Field(
        default=False, description="Open the link target in a new tab instead of following it."
    )


class BrowserTypeAction(Action):
    kind: Literal["BrowserTypeAction"] = "BrowserTypeAction"
    index: int = Field(
        ge=0, description="Index of the input, textarea or select, as browser_get_state lists it."
    )
    text: str = Field(
        description="Text that replaces the field's content (for a select: the option to choose)."
    )


class BrowserGetStateAction(Action):
    kind: Literal["BrowserGetStateAction"] = "BrowserGetStateAction"
    include_screenshot: bool = Field(
        default=False, description="Also take a screenshot of the visible part of the page."
    )


class BrowserGetContentAction(Action):
    kind: Literal["BrowserGetContentAction"] = "BrowserGetContentAction"
    extract_links: bool = Field(
        default=False, description="Keep links as [text](url) instead of bare text."
    )
    start_from_char: int = Field(
        default=0,
        ge=0,
        description="Start the text at this character, to page through long content.",
    )


class BrowserScrollAction(Action):
    kind: Literal["BrowserScrollAction"] = "BrowserScrollAction"
    direction: Literal["up", "down"] = Field(
        default="down", description="Scroll by most of a screen, up or down."
    )


class BrowserGoBackAction(Action):
    kind: Literal["BrowserGoBackAction"] = "BrowserGoBackAction"


class BrowserListTabsAction(Action):
    kind: Literal["BrowserListTabsAction"] = "BrowserListTabsAction"


class BrowserSwitchTabAction(Action):
    kind: Literal["BrowserSwitchTabAction"] = "BrowserSwitchTabAction"
    tab_id: str = Field(description="Id of the tab, as browser_list_tabs shows it.")


class BrowserCloseTabAction(Action):
    kind: Literal["BrowserCloseTabAction"] = "BrowserCloseTabAction"
    tab_id: str = Field(description="Id of the tab, as browser_list_tabs shows it.")


class BrowserGetStorageAction(Action):
    kind: Literal["BrowserGetStorageAction"] = "BrowserGetStorageAction"


class BrowserSetStorageAction(Action):
    kind: Literal["BrowserSetStorageAction"] = "BrowserSetStorageAction"
    storage_state: dict[str, Any] = Field(
        description='Playwright storage state: {"cookies": [{name, value, domain, path, '
        'expires, httpOnly, secure, sameSite}], "origins": [{"origin": "https://...", '
        '"localStorage": [{name, value}]}]}, as browser_get_storage returns it.'
    )


class BrowserStartRecordingAction(Action):
    kind: Literal["BrowserStartRecordingAction"] = "BrowserStartRecordingAction"


class BrowserStopRecordingAction(Action):
    kind: Literal["BrowserStopRecordingAction"] = "BrowserStopRecordingAction"


class BrowserObservation(Observation):
    """What every browser tool returns: text (and a screenshot for vision models) in
    `content`.

    `screenshot_data` stays None: the screenshot already travels once as a data: URL in an
    ImageContent when the model reads images, and as a file path otherwise; a second base64
    copy would double the size of every event that carries one.
    """

    kind: Literal["BrowserObservation"] = "BrowserObservation"
    screenshot_data: str | None = Field(
        default=None,
        description="Base64 PNG of a screenshot; always None here (see the class docstring).",
    )
    full_output_save_dir: str | None = Field(
        default=None,
        description="Directory holding the full output when the text shown was cut short.",
    )


#: The browser's Action kinds, in the order its tool set lists them.
AnyBrowserAction: TypeAlias = (
    BrowserAction
    | BrowserNavigateAction
    | BrowserClickAction
    | BrowserTypeAction
    | BrowserGetStateAction
    | BrowserGetContentAction
    | BrowserScrollAction
    | BrowserGoBackAction
    | BrowserListTabsAction
    | BrowserSwitchTabAction
    | BrowserCloseTabAction
    | BrowserGetStorageAction
    | BrowserSetStorageAction
    | BrowserStartRecordingAction
    | BrowserStopRecordingAction
)
ACTION_TYPES: tuple[type[Action], ...] = get_args(AnyBrowserAction)


__all__ = [
    "ACTION_TYPES",
    "AnyBrowserAction",
    "BrowserAction",
    "BrowserClickAction",
    "BrowserCloseTabAction",
    "BrowserGetContentAction",
    "BrowserGetStateAction",
    "BrowserGetStorageAction",
    "BrowserGoBackAction",
    "BrowserListTabsAction",
    "BrowserNavigateAction",
    "BrowserObservation",
    "BrowserScrollAction",
    "BrowserSetStorageAction",
    "BrowserStartRecordingAction",
    "BrowserStopRecordingAction",
    "BrowserSwitchTabAction",
    "BrowserTypeAction",
]
