"""vision_inspect: a model that cannot see images asks a vision-capable profile about one
(OpenHands' VisionInspectTool, which takes images of the latest user message; here also a
workspace image file or the last browser screenshot).

`path` and `screenshot` are left out of the stored event when unused, so the action keeps the
public shape (whose models refuse unknown fields) whenever it is the public request.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from events.tools.models import VisionInspectAction, VisionInspectObservation
from tools import files
from tools.base import TextContent, Tool, ToolError, params_as, run_in_thread
from tools.conversation import ProfileNotFound, bounded
from tools.models.common import history_of, models_of, profile_list

#: Largest image sent to the vision model.
MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
PROMPT = "Answer the user's question about the attached image. Return concise text only."


class VisionParams(BaseModel):
    """`params` of vision_inspect in `agent.tools`."""

    model_config = ConfigDict(extra="forbid")

    profile: str | None = Field(default=None, min_length=1, max_length=100)
    """The saved profile asked when the call names none (else the first that sees images)."""


def _mime(data: bytes) -> str | None:
    for magic, mime in MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def data_url(data: bytes, where: str) -> str:
    mime = _mime(data)
    if mime is None:
        raise ToolError(f"{where} is not a PNG, JPEG, GIF or WebP image.")
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def last_screenshot(state_dir: Path) -> Path | None:
    """The newest screenshot the browser tools saved for this conversation."""
    shots = sorted(
        (state_dir / "browser").glob("screenshot-*.png"), key=lambda p: p.stat().st_mtime_ns
    )
    return shots[-1] if shots else None


class VisionInspectTool(Tool):
    name = "vision_inspect"
    description = (
        "Ask a saved vision-capable LLM profile about an image and get a text answer: an image "
        "of the latest user message (image_index), a workspace image file (path), or the last "
        "browser screenshot (screenshot: true). Use it when you cannot see images yourself and "
        "visual details matter; ask a specific question."
    )
    action_type = VisionInspectAction
    observation_type = VisionInspectObservation
    acts = False
    read_only = True

    async def run(self, action: VisionInspectAction) -> VisionInspectObservation:
        models = models_of(self.ctx)
        image = await self._image(action)
        name = (
            action.profile_name
            or params_as(VisionParams, self.params).profile
            or await self._first_vision()
        )
        fields: dict[str, Any] = {
            "image_index": action.image_index,
            "question": action.question,
            "profile_name": name,
        }
        try:
            if not await models.supports_vision(name):
                raise ToolError(
                    f"The profile {name!r} does not read images; " + profile_list(models.profiles())
                )
            answer = await models.ask(
                name,
                [
                    {"role": "system", "content": PROMPT},
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": action.question},
                            {"type": "image_url", "image_url": {"url": image}},
                        ],
                    },
                ],
            )
        except ProfileNotFound:
            raise ToolError(
                f"No LLM profile is named {name!r}. " + profile_list(models.profiles())
            ) from None
        except RuntimeError as exc:
            raise ToolError(f"The vision model failed: {exc}") from None
        text = bounded(answer.text.strip())
        if not text:
            raise ToolError("The vision model returned no text answer.")
        return VisionInspectObservation(
            content=[TextContent(text=text)],
            answer=text,
            model=answer.model,
            base_url=answer.base_url,
            **fields,
        )

    async def _first_vision(self) -> str:
        models = models_of(self.ctx)
        for profile in models.profiles():
            if profile.vision or (
                profile.vision is None and await models.supports_vision(profile.name)
            ):
                return profile.name
        raise ToolError("No saved LLM profile reads images. " + profile_list(models.profiles()))

    async def _image(self, action: VisionInspectAction) -> str:
        root = self.ctx.working_dir
        if action.path is not None and action.screenshot:
            raise ToolError("Give `path` or `screenshot`, not both.")
        if action.path is not None:
            try:
                target = files.confined(root, action.path)
                data = await run_in_thread(
                    lambda: files.read_bytes(
                        target, root=root, limit=MAX_IMAGE_BYTES, tool="vision_inspect"
                    )
                )
            except files.Refusal as exc:
                raise ToolError(str(exc)) from None
            return data_url(data, action.path)
        if action.screenshot:
            shot = await run_in_thread(last_screenshot, self.ctx.state_dir)
            if shot is None:
                raise ToolError(
                    "The browser has taken no screenshot in this conversation "
                    "(browser_get_state with include_screenshot takes one)."
                )
            return data_url(await run_in_thread(shot.read_bytes), "the screenshot")
        urls = history_of(self.ctx).user_images()
        if action.image_index >= len(urls):
            raise ToolError(
                f"Image index {action.image_index} is out of range: the latest user "
                f"message with images has {len(urls)}. Use `path` for a workspace "
                "file or `screenshot` for the browser's last screenshot."
            )
        return urls[action.image_index]
