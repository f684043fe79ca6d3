"""litellm's import and set-up, once per process: its settings, the import itself (in a thread,
or at once in a template before it forks), what its first call imports, and stand-ins that
keep its tokenizer unloaded for calls that need none.

litellm takes seconds and ~170 MB to import, so it is imported on first use, in a thread (the
event loop keeps serving meanwhile), or ahead of it (`prewarm`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import importlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from agent_server import tls

_import_lock = threading.Lock()
#: litellm once `_import` has set it up (None before: its module may be half-imported).
_litellm: Any = None
_prewarm_started = False


#: litellm's settings read from the environment, at import and at each call (so a process
#: forked after the import keeps them: `agent_server.template`).
ENVIRONMENT = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    # litellm's own HTTP handler for OpenAI-compatible calls: the OpenAI SDK's typed
    # transform of every request costs ~0.35 ms per message, which made each step slower
    # the longer a conversation got (170 ms per step at 500 steps; flat with this).
    "EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER": "True",
    # litellm's logging scans every message of every request for base64 to shorten; we
    # log no request bodies, so that work (growing with the conversation) is skipped.
    "MAX_BASE64_LENGTH_FOR_LOGGING": "0",
    # Not "DEV": litellm's import would read a `.env` file found by walking up from its own
    # package directory (the settings of whatever lies above the installation).
    "LITELLM_MODE": "PRODUCTION",
}


def _import() -> Any:
    global _litellm
    with _import_lock:  # one import even when several runs start together
        if _litellm is not None:
            return _litellm
        for name, value in ENVIRONMENT.items():
            os.environ.setdefault(name, value)
        # The import allocates a few hundred thousand long-lived objects: the collector would
        # walk them again and again meanwhile (a fifth of the import's time), for nothing.
        collecting = gc.isenabled()
        gc.disable()
        try:
            module: Any = importlib.import_module("litellm")
            module.telemetry = False
            module.suppress_debug_info = True
            for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
                logging.getLogger(name).setLevel(logging.WARNING)
            module.drop_params = True
            _lazy_tokenizer()
            _no_tokenizer_for_nothing()
            _first_call()
            # Without this every full collection walks all that litellm left behind (tens of
            # ms, more often the more a step allocates). No collection first: it would walk
            # them all once (~0.25 s, the first model call waiting) to free ~1,000 objects.
            gc.freeze()
        finally:
            if collecting:
                gc.enable()
        _litellm = module
        return module


#: What a first model call imports besides litellm itself (anyio's backend, and what litellm
#: loads on its first completion; measured with a profile of a server's first conversation,
#: and held complete by a test). A name another litellm version lacks is skipped.
FIRST_CALL = (
    "anyio._backends._asyncio",
    "anyio.streams.tls",
    "anyio.streams.memory",
    "litellm.proxy._types",
    "litellm.proxy.types_utils.utils",
    "litellm.proxy.openai_files_endpoints.common_utils",
    "litellm.proxy._experimental.mcp_server.stdio_gate",
    "litellm.llms.litellm_proxy.chat.transformation",
    "litellm.llms.openai_like.dynamic_config",
    "litellm.llms.openai.chat.gpt_audio_transformation",
    "litellm.llms.vertex_ai.vertex_ai_partner_models.anthropic.transformation",
    "litellm.types.object_permission",
    "litellm.types.integrations.compression_interception",
    "litellm.types.proxy.carried_budget_state",
    "litellm.types.proxy.control_plane_endpoints",
    "litellm.types.proxy.spend_capture_rate",
    "litellm._service_logger",
    "litellm.integrations.prometheus_services",
    "litellm.types.integrations.prometheus",
)


def _first_call() -> None:
    """What the first call loads besides (~0.12 s): FIRST_CALL and the CA bundle, so that a
    conversation that comes after the import (the background one) waits for neither."""
    for name in FIRST_CALL:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    tls.client_context()


class _LazyEncoding:
    """litellm hands its default tokenizer (tiktoken's cl100k, ~45 MB resident) to every
    call, whether the call counts tokens or not, and a call to a server that reports its
    usage never does. This stands in for it and loads it on first real use."""

    def __init__(self, load: Callable[[], Any]) -> None:
        self._load = load
        self._encoding: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._encoding is None:
            self._encoding = self._load()
        return getattr(self._encoding, name)


def _lazy_tokenizer() -> None:
    main: Any = importlib.import_module("litellm.main")
    if getattr(main, "_encoding_cache", "absent") is None and "encoding" not in vars(main):
        main._encoding_cache = _LazyEncoding(main._load_default_encoding)


def _no_tokenizer_for_nothing() -> None:
    """litellm prices a streamed call the moment its stream begins (`completion_cost` on the
    stream wrapper, in `acompletion`'s and `aresponses`' wrapper): with no response to read
    usage from, it counts the tokens of an empty completion, and loaded the tokenizer to do
    so (tiktoken's cl100k, ~40 MB resident, whatever the server reports). That price is never
    the call's: the assembled response is priced from its usage. An empty text is 0 tokens
    (tiktoken's count of it encodes nothing); other counts still go to litellm, so a stream
    from a server that reports no usage is still counted."""
    calculator: Any = importlib.import_module("litellm.cost_calculator")
    count = getattr(calculator, "token_counter", None)
    if count is None or getattr(count, "_nothing_counted", False):
        return

    @functools.wraps(count)
    def token_counter(*args: Any, **kwargs: Any) -> Any:
        text = kwargs.get("text")
        empty = text == "" or (isinstance(text, list) and not any(text))
        if not args and empty and not kwargs.get("messages") and not kwargs.get("tools"):
            return 0
        return count(*args, **kwargs)

    token_counter._nothing_counted = True  # type: ignore[attr-defined]
    calculator.token_counter = token_counter


async def load() -> Any:
    """litellm, imported in a thread (its price map read from the package, not fetched)."""
    if _litellm is not None:
        return _litellm
    return await asyncio.to_thread(_import)


def load_now() -> Any:
    """litellm, imported in this thread (a template process loads it before it forks)."""
    return _import()


def prewarm() -> None:
    """Start importing litellm in the background (a conversation will probably run soon);
    once per process."""
    global _prewarm_started
    if _litellm is None and not _prewarm_started:
        _prewarm_started = True
        threading.Thread(target=_import, name="import-litellm", daemon=True).start()
