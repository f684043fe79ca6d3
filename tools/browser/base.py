"""The base of the browser tools: their per-conversation settings, what one action produced,
and the run that puts every action through the conversation's session guard."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from events.tools.browser import BrowserObservation
from tools.base import ImageContent, TextContent, Tool, ToolContext

if TYPE_CHECKING:  # BrowserToolParams is read without loading Playwright
    from tools.browser.session import BrowserSession


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
