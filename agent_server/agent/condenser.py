"""Condensation: keep a long conversation inside the model's context window.

The view keeps its head (the system prompt and the first user message, or the first
`keep_first` messages) and the recent tail; the middle is summarized by the LLM and forgotten
(a Condensation event: the log itself loses nothing). The tail never starts with a tool result,
so a call and its result are never split.

`agent.condenser` says when: our own form, the OpenHands SDK's LLMSummarizingCondenser (each
of a PipelineCondenser's in turn), or none (null, NoOpCondenser). Whatever it says, an explicit
CondensationRequest and a context-window error still condense.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent_server.agent.llm import LLMFailure
from agent_server.agent.spec import (
    CondenserConfig,
    CondenserSpec,
    LLMConfig,
    LLMSummarizingCondenser,
    PipelineCondenser,
)
from agent_server.agent.view import View
from events import Condensation

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


def estimate_tokens(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> int:
    return (len(json.dumps(messages)) + len(json.dumps(tools or []))) // CHARS_PER_TOKEN


@dataclass(frozen=True)
class Rule:
    """When to condense, and with which LLM (one per summarizing condenser of the spec)."""

    #: None: the conversation's LLM at the moment (a switch_llm changes it).
    llm: LLMConfig | None
    max_share: float | None = None
    max_tokens: int | None = None
    max_events: int | None = None
    #: Messages of the view's head always kept (None: through the first user message).
    keep_first: int | None = None


def rules(spec: CondenserSpec | None) -> list[Rule]:
    if isinstance(spec, CondenserConfig):
        if not spec.enabled:
            return []
        return [Rule(None, spec.max_share, spec.max_tokens, spec.max_events)]
    if isinstance(spec, LLMSummarizingCondenser):
        return [Rule(spec.llm, None, spec.max_tokens, spec.max_size, spec.keep_first)]
    if isinstance(spec, PipelineCondenser):
        return [r for c in spec.condensers for r in rules(c)]
    return []  # null, NoOpCondenser


def fallback(spec: CondenserSpec | None) -> Rule:
    """What an explicit request or a context-window error condenses with."""
    found = rules(spec)
    if found:
        return found[0]
    if isinstance(spec, CondenserConfig):  # switched off, its bounds still size the tail
        return Rule(None, spec.max_share, spec.max_tokens, spec.max_events)
    return Rule(None, CondenserConfig().max_share)


class Condenser:
    def __init__(
        self, spec: CondenserSpec | None, llm: Callable[[], LLMConfig], model: Model
    ) -> None:
        """`llm` gives the conversation's LLM at the moment (a switch changes it)."""
        self.llm = llm
        self.rules = rules(spec)
        self._fallback = fallback(spec)
        #: The rule the next condensation follows.
        self.config = self._fallback
        self.model = model
        #: Token budget by rule and model (a switch to another model has its own window).
        self._limits: dict[tuple[int, str], int | None] = {}

    @property
    def llm_config(self) -> LLMConfig:
        return self._llm_of(self.config)

    def _llm_of(self, rule: Rule) -> LLMConfig:
        return rule.llm or self.llm()

    async def limit(self, rule: Rule | None = None) -> int | None:
        """Token budget of a prompt: the smaller of max_tokens and max_share of the window."""
        rule = rule or self.config
        llm = self._llm_of(rule)
        key = (id(rule), llm.model)
        if key not in self._limits:
            limits = [rule.max_tokens] if rule.max_tokens else []
            if rule.max_share:
                window = await self.model.context_window(llm)
                if window:
                    limits.append(int(window * rule.max_share))
            self._limits[key] = min(limits) if limits else None
        return self._limits[key]

    async def needed(self, view: View, tools: list[dict[str, Any]]) -> bool:
        self.config = self._fallback
        if view.condensation_requested:
            return True
        for rule in self.rules:
            if await self._over(rule, view, tools):
                self.config = rule
                return True
        return False

    async def _over(self, rule: Rule, view: View, tools: list[dict[str, Any]]) -> bool:
        if rule.max_events and len(view.messages) > rule.max_events:
            return True
        limit = await self.limit(rule)
        return limit is not None and estimate_tokens(view.request(), tools) > limit

    async def condense(self, sink: EventSink, view: View, tools: list[dict[str, Any]]) -> bool:
        """Append a Condensation for the middle of the view; False when there is no middle."""
        messages = view.messages
        if self.config.keep_first is None:
            head = next((i + 1 for i, m in enumerate(messages) if m["role"] == "user"), 1)
        else:
            head = max(1, self.config.keep_first)
            while head < len(messages) and messages[head]["role"] == "tool":
                head += 1  # a kept call keeps its results
        tail = self._tail_start(messages, await self.limit(), tools)
        if tail <= head:
            return False
        middle = messages[head:tail]
        forgotten = [i for m in middle for i in view.sources(m) if i]
        summary, response_id = await self._summarize(middle)
        await sink.append(
            Condensation(
                forgotten_event_ids=list(dict.fromkeys(forgotten)),
                summary=summary,
                summary_offset=head,
                llm_response_id=response_id,
            )
        )
        return True

    def _tail_start(
        self, messages: list[dict[str, Any]], limit: int | None, tools: list[dict[str, Any]]
    ) -> int:
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
        text = render(middle)
        if len(text) > room:  # keep the start and the end of what is forgotten
            text = text[: room // 2] + "\n[...]\n" + text[-(room // 2) :]
        try:
            reply = await self.model.complete(
                self.llm_config,
                [
                    {"role": "system", "content": PROMPT},
                    {"role": "user", "content": text},
                ],
                tools=[],
            )
            return reply.content.strip() or "(empty summary)", reply.response_id
        except LLMFailure as failure:
            # Forgetting without a summary beats failing the run on an overfull context.
            return (
                f"(The earlier part of this conversation could not be summarized: {failure.code}.)",
                "none",
            )


def render(messages: list[dict[str, Any]]) -> str:
    lines = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(b.get("text", "") for b in content if isinstance(b, dict))
        text = (content or "")[:MESSAGE_CHARS]
        for call in m.get("tool_calls") or []:
            text += (
                f"\n-> {call['function']['name']}({call['function']['arguments'][:MESSAGE_CHARS]})"
            )
        lines.append(f"[{m['role']}] {text}")
    return "\n".join(lines)
