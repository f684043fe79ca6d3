"""Where a request through the gateway goes: the user's LLM base URL, or the provider's default
one, joined with the path below the gateway.

The base is the user's `llm_base_url` when set; otherwise the provider's own, as the sandbox's
model client would have called it without a base URL: what litellm gives for the provider
(OpenAI-compatible providers such as Groq or Mistral have one there), else `DEFAULT_BASES` for
the common providers litellm leaves to their SDKs. A provider with neither (Azure, Bedrock,
Vertex: their base is the deployment's) is refused with a reason, not guessed.

Before any call the base is checked as the control plane's own outbound calls are
(`control_plane.llm.refused_target`): never a link-local address, this machine's loopback only
for process sandboxes (which share its network anyway). The verdict of a base is kept for a
short while (`TARGET_TTL`): a conversation calls the same base step after step, and a DNS
lookup before each call would add its time to every step for the same answer.
"""

from __future__ import annotations

import asyncio
import functools
import time
from urllib.parse import urlsplit, urlunsplit

from control_plane.gateway.errors import Kind, Refusal
from control_plane.llm import _litellm, refused_target

#: The providers' public bases that litellm does not name (their SDKs' defaults).
DEFAULT_BASES = {
    "openai": "https://api.openai.com/v1",
    "text-completion-openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com/v1beta",
    "openrouter": "https://openrouter.ai/api/v1",
}
#: Seconds a base's verdict (`refused_target`) is kept.
TARGET_TTL = 60.0
#: Bases whose verdicts are kept at most (the oldest forgotten first).
MAX_TARGETS = 1024


@functools.lru_cache(maxsize=256)
def provider_of(model: str) -> tuple[str | None, str | None]:
    """(the provider litellm reads from `model`, the base litellm knows for it); Nones when
    litellm cannot tell. Blocking (litellm is imported on first use)."""
    try:
        _, provider, _, base = _litellm().get_llm_provider(model=model)
    except Exception:  # litellm's BadRequestError for a model without a provider
        return None, None
    return (str(provider) if provider else None), (str(base) if base else None)


async def base_for(llm_base_url: str | None, model: str | None) -> str:
    """The upstream base for a user's settings; Refusal when there is none. litellm is asked
    (and imported, seconds the first time) only when the settings name no base."""
    if llm_base_url:
        return llm_base_url
    provider, known = (None, None) if not model else await asyncio.to_thread(provider_of, model)
    base = known or DEFAULT_BASES.get(provider or "")
    if base is None:
        raise Refusal(
            Kind.NO_UPSTREAM,
            (
                f"The LLM gateway knows no default base URL for the provider "
                f"{provider or 'of model ' + repr(model)}: set llm_base_url in your settings."
            ),
        )
    return base


def join(base: str, path: str, query: str) -> str:
    """`base` with `path` (below the gateway) and `query` after it. A base that already ends
    with the path is not given it twice: litellm's Anthropic client sends `/v1/messages` to a
    base unless the base ends with it, and the gateway's own base never does; so a user's
    `https://host/v1/messages` is called as it is, as the client would have called it."""
    parts = urlsplit(base)
    prefix = parts.path.rstrip("/")
    path = "/" + path.lstrip("/") if path.strip("/") else ""
    full = prefix if path and prefix.endswith(path.rstrip("/")) else prefix + path
    joined = "&".join(q for q in (parts.query, query) if q)
    return urlunsplit((parts.scheme, parts.netloc, full, joined, ""))


class Targets:
    """`refused_target` with its verdicts kept for TARGET_TTL seconds."""

    def __init__(self, *, loopback: bool) -> None:
        self.loopback = loopback
        self._verdicts: dict[str, tuple[float, str | None]] = {}

    async def check(self, base: str) -> None:
        """Refusal (403) when the control plane must not call `base`."""
        now = time.monotonic()
        kept = self._verdicts.get(base)
        if kept is None or now - kept[0] > TARGET_TTL:
            why = await asyncio.to_thread(refused_target, base, loopback=self.loopback)
            if len(self._verdicts) >= MAX_TARGETS:
                self._verdicts.pop(next(iter(self._verdicts)))
            kept = self._verdicts[base] = (now, why)
        if kept[1] is not None:
            raise Refusal(Kind.TARGET_REFUSED, f"The LLM gateway refuses this base URL: {kept[1]}")
