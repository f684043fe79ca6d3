"""An ACP prompt's content blocks -> the content of a user message (`{type: text}` items, and
`{type: image, image_urls}` where the service takes images).

Text is kept as written. A file the editor embeds (an @-mention, with the `embeddedContext`
capability) becomes text naming the file, its content fenced, since the sandbox cannot read
the editor's disk; a link becomes its URI; images are data URLs, or a note where the service
takes text only. Each text item and the whole message are bounded as the service bounds them.
"""

from __future__ import annotations

from typing import Any

from acp.schema import (
    AudioContentBlock,
    BlobResourceContents,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceContentBlock,
    TextContentBlock,
    TextResourceContents,
)

Block = (
    TextContentBlock
    | ImageContentBlock
    | AudioContentBlock
    | ResourceContentBlock
    | EmbeddedResourceContentBlock
)

#: The service's bounds: characters of one text item, items of one message.
MAX_TEXT = 1_000_000
MAX_ITEMS = 100


def _text(text: str) -> dict[str, Any]:
    if len(text) > MAX_TEXT:
        text = text[: MAX_TEXT - 100] + f"\n[... {len(text) - MAX_TEXT + 100} characters cut]"
    return {"type": "text", "text": text}


def _resource(resource: TextResourceContents | BlobResourceContents) -> str:
    if isinstance(resource, TextResourceContents):
        return f'<file uri="{resource.uri}">\n{resource.text}\n</file>'
    return f"[binary file {resource.uri} ({resource.mime_type or 'unknown type'}): not sent]"


def convert(blocks: list[Block], images: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            out.append(_text(block.text))
        elif isinstance(block, ImageContentBlock):
            if images:
                out.append(
                    {"type": "image", "image_urls": [f"data:{block.mime_type};base64,{block.data}"]}
                )
            else:
                out.append(_text("[an image was attached: this service takes text only]"))
        elif isinstance(block, EmbeddedResourceContentBlock):
            out.append(_text(_resource(block.resource)))
        elif isinstance(block, ResourceContentBlock):
            out.append(_text(f"[{block.name}]({block.uri})"))
        else:
            out.append(_text("[an audio clip was attached: not sent]"))
    if len(out) > MAX_ITEMS:  # the rest as one text item, so nothing is silently lost
        rest = "\n\n".join(item.get("text", "[image]") for item in out[MAX_ITEMS - 1 :])
        out = out[: MAX_ITEMS - 1] + [_text(rest)]
    if not any(item["type"] == "text" for item in out):
        out.append(_text("(see the attached image)" if out else "(empty message)"))
    return out


__all__ = ["Block", "convert"]
