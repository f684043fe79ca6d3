"""The control plane's own few model calls, for the console: checking that the user's LLM
settings answer ("test connection"), a conversation's title from its first message (as the
OpenHands app server makes one), and the model names litellm knows (the settings' suggestions).

They go through litellm with the user's settings, one attempt, a short answer and a time limit;
an error comes back as its class and message with the key masked, never raised past here.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import ipaddress
import json
import os
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from control_plane.settings import UserSettings
from core.masking import Masker

TIMEOUT = 30.0
TITLE_PROMPT = (
    "Write a short title (at most 6 words, no quotes, no final period) for a conversation that "
    "starts with this request:\n\n{message}"
)
MAX_MESSAGE_CHARS = 2000
MAX_TITLE_CHARS = 80
MAX_MODELS = 10_000
MAX_ERROR_CHARS = 300

#: litellm's import has been started in the background (`preload`).
_preloading = False


@dataclass(frozen=True)
class Answer:
    ok: bool
    text: str
    """The model's answer, or the error's class and message (masked)."""


def _litellm() -> Any:
    """litellm, imported as the agent server does it: its price map read from the package (not
    fetched), no telemetry."""
    module = sys.modules.get("litellm")
    # Another thread may be importing it still (the gateway prices calls in threads): a module
    # half made is not taken, the import below waits for it to be whole.
    if module is not None and not getattr(
        getattr(module, "__spec__", None), "_initializing", False
    ):
        return module
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_TELEMETRY", "False")
    # Not "DEV": its import would read a `.env` found by walking up from its own package.
    os.environ.setdefault("LITELLM_MODE", "PRODUCTION")
    return importlib.import_module("litellm")


def preload() -> None:
    """Import litellm now, in a thread of its own, once per process. The gateway prices each
    model call with it: imported at the first call instead, its ~1.7 s of work under the
    interpreter's lock would land on the first sandboxes' starts and first steps (the second
    start after a control plane came up took 0.9 s instead of 0.15 s). A daemon: a control
    plane that stops meanwhile does not wait for it."""
    global _preloading
    if _preloading or "litellm" in sys.modules:
        return
    _preloading = True
    threading.Thread(target=_litellm, name="import-litellm", daemon=True).start()


def refused_target(base_url: str, *, loopback: bool) -> str | None:
    """Why the control plane will not call `base_url` for a user (None: it will). A user's
    base URL makes this process send requests where it points: never to a link-local address
    (a cloud's metadata service answers there), and to this machine's loopback only where the
    user's sandboxes reach it anyway (`loopback`: process sandboxes share the host's network;
    containers do not). Blocking (a name is resolved)."""
    host = urlsplit(base_url).hostname
    if not host:
        return "The LLM base URL has no host."
    try:
        found = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return None  # unresolvable: litellm's own error says so
    for text in found:
        address = ipaddress.ip_address(text.split("%")[0])
        if address.is_link_local or address.is_unspecified or address.is_multicast:
            return f"The control plane does not call {host}: a link-local or special address."
        if address.is_loopback and not loopback:
            return (
                f"The control plane does not call {host}: this machine's loopback, which "
                "your sandboxes cannot reach either."
            )
    return None


async def ask(
    settings: UserSettings, prompt: str, max_tokens: int = 30, *, loopback: bool = True
) -> Answer:
    """One completion with the user's model; never raises for the model's failures.
    `loopback`: whether this machine's loopback is a target (`refused_target`)."""
    if not settings.llm_model:
        return Answer(False, "No model is set: choose one in Settings (llm_model).")
    if settings.llm_base_url and (
        why := await asyncio.to_thread(refused_target, settings.llm_base_url, loopback=loopback)
    ):
        return Answer(False, why)
    litellm = await asyncio.to_thread(_litellm)
    masker = Masker({"key": settings.llm_api_key} if settings.llm_api_key else {})
    kwargs: dict[str, Any] = {
        "model": settings.llm_model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "timeout": TIMEOUT,
        "num_retries": 0,
    }
    if settings.llm_base_url:
        kwargs["base_url"] = settings.llm_base_url
    if settings.llm_api_key:
        kwargs["api_key"] = settings.llm_api_key
    try:
        # The blocking call in a thread: litellm's async clients outlive the call, bound to
        # this event loop, and would be left open when the control plane stops.
        response = await asyncio.to_thread(litellm.completion, **kwargs)
    except Exception as exc:  # the model's failure is the answer
        # Short: the base URL is the user's, and what a server that is not an LLM answered
        # is no business of the page.
        return Answer(False, masker.text(f"{type(exc).__name__}: {exc}")[:MAX_ERROR_CHARS])
    content = response.choices[0].message.content if response.choices else None
    return Answer(True, masker.text(str(content or "")))


async def title(settings: UserSettings, message: str, *, loopback: bool = True) -> str | None:
    """A title for a conversation opening with `message`, or None when the model fails."""
    answer = await ask(
        settings, TITLE_PROMPT.format(message=message[:MAX_MESSAGE_CHARS]), loopback=loopback
    )
    if not answer.ok:
        return None
    line = next((part.strip() for part in answer.text.splitlines() if part.strip()), "")
    line = line.strip("\"'`*# ").removeprefix("Title:").strip().strip("\"'")
    return line[:MAX_TITLE_CHARS].rstrip() or None


def known_models() -> list[str]:
    """The chat models litellm knows, with their provider prefix where it is not OpenAI's: read
    from the price map litellm ships (the settings page needs no litellm import for it)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return []
    prices = Path(spec.origin).parent / "model_prices_and_context_window_backup.json"
    try:
        cost: dict[str, Any] = json.loads(prices.read_text())
    except (OSError, ValueError):
        return []
    names: set[str] = set()
    for name, info in cost.items():
        if not isinstance(info, dict) or info.get("mode") not in (None, "chat", "responses"):
            continue
        provider = info.get("litellm_provider") or ""
        if "/" in name or provider in ("openai", "text-completion-openai", ""):
            names.add(name)
        else:
            names.add(f"{provider}/{name}")
    names.discard("sample_spec")
    return sorted(names)[:MAX_MODELS]
