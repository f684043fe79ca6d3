"""Condensation: keep a long conversation inside the model's context window.

The view keeps the system prompt, the first user message and the recent tail; the middle is
summarized by the LLM and forgotten (a Condensation event: the log itself loses nothing). The
tail never starts with a tool result, so a call and its result are never split.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agent_server.agent.llm import LLMFailure
from agent_server.agent.view import View
from agent_server.events import Condensation
from agent_server.agent.spec import CondenserConfig, LLMConfig

if TYPE_CHECKING:
    from agent_server.agent.model import Model
    from agent_server.agent.sink import EventSink

#: Characters per token assumed when estimating a prompt (a conservative ratio).
CHARS_PER_TOKEN = 3
#: Share of the limit the kept tail may use; the rest leaves room to grow before the next one.
TAIL_SHARE = 0.4
#: Share of the limit the summary request may use.
SUMMARY_INPUT_SHARE = 0.6
#: Characters of each message kept when rendering the middle for the summary.
MESSAGE_CHARS = 2000

PROMPT = """\
You condense the history of a coding agent's session so it can go on working. Summarize the \
events below: the user's goals and constraints, what was done (files changed, commands run and \
their outcomes), what was learned, what failed, and what remains to do. Keep names, paths, \
commands and numbers exact. Write plain text, at most about 400 words."""


def estimate_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
    return (len(json.dumps(messages)) + len(json.dumps(tools or []))) // CHARS_PER_TOKEN


class Condenser:
    def __init__(self, config: CondenserConfig, llm_config: LLMConfig, model: Model) -> None:
        self.config = config
        self.llm_config = llm_config
        self.model = model
        self._limit: int | None = None
        self._looked_up = False

    async def limit(self) -> int | None:
        """Token budget of a prompt: the smaller of max_tokens and max_share of the window."""
        if not self._looked_up:
            self._looked_up = True
            limits = [self.config.max_tokens] if self.config.max_tokens else []
            window = await self.model.context_window(self.llm_config)
            if window:
                limits.append(int(window * self.config.max_share))
            self._limit = min(limits) if limits else None
        return self._limit

    async def needed(self, view: View, tools: list[dict[str, Any]]) -> bool:
        if not self.config.enabled:
            return view.condensation_requested
        if view.condensation_requested:
            return True
        if self.config.max_events and len(view.messages) > self.config.max_events:
            return True
        limit = await self.limit()
        return limit is not None and estimate_tokens(view.request(), tools) > limit

    async def condense(self, sink: EventSink, view: View, tools: list[dict[str, Any]]) -> bool:
        """Append a Condensation for the middle of the view; False when there is no middle."""
        messages = view.messages
        head = next((i + 1 for i, m in enumerate(messages) if m["role"] == "user"), 1)
        tail = self._tail_start(messages, await self.limit(), tools)
        if tail <= head:
            return False
        middle = messages[head:tail]
        forgotten = [i for m in middle for i in view.sources(m) if i]
        summary, response_id = await self._summarize(middle)
        await sink.append(Condensation(forgotten_event_ids=list(dict.fromkeys(forgotten)),
                                       summary=summary, summary_offset=head,
                                       llm_response_id=response_id))
        return True

    def _tail_start(self, messages: list[dict[str, Any]], limit: int | None,
                    tools: list[dict[str, Any]]) -> int:
        if limit is not None:
            budget = int(limit * TAIL_SHARE) - estimate_tokens([], tools)
            start, used = len(messages), 0
            while start > 0:
                cost = estimate_tokens([messages[start - 1]])
                if used + cost > budget:
                    break
                used += cost
                start -= 1
        elif self.config.max_events:
            start = len(messages) - max(2, self.config.max_events // 2)
        else:  # no budget known (a context error told us we are over it): keep the last half
            start = len(messages) - max(2, len(messages) // 2)
        if limit is not None and self.config.max_events:  # both bounds hold
            start = max(start, len(messages) - max(2, self.config.max_events // 2))
        start = max(start, 0)
        # Never split a call from its result: a tail may not open with a tool result.
        while 0 < start < len(messages) and messages[start]["role"] == "tool":
            start -= 1
        return start

    async def _summarize(self, middle: list[dict[str, Any]]) -> tuple[str, str]:
        limit = await self.limit()
        room = int((limit or 30_000) * SUMMARY_INPUT_SHARE) * CHARS_PER_TOKEN - len(PROMPT)
        text = _render(middle)
        if len(text) > room:  # keep the start and the end of what is forgotten
            text = text[: room // 2] + "\n[...]\n" + text[-(room // 2):]
        try:
            reply = await self.model.complete(self.llm_config, [
                {"role": "system", "content": PROMPT},
                {"role": "user", "content": text},
            ], tools=[])
            return reply.content.strip() or "(empty summary)", reply.response_id
        except LLMFailure as failure:
            # Forgetting without a summary beats failing the run on an overfull context.
            return f"(The earlier part of this conversation could not be summarized: {failure.code}.)", "none"


def _render(messages: list[dict[str, Any]]) -> str:
    lines = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(b.get("text", "") for b in content if isinstance(b, dict))
        text = (content or "")[:MESSAGE_CHARS]
        for call in m.get("tool_calls") or []:
            text += f"\n-> {call['function']['name']}({call['function']['arguments'][:MESSAGE_CHARS]})"
        lines.append(f"[{m['role']}] {text}")
    return "\n".join(lines)
