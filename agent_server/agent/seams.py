"""SessionSeams: what a session offers its tools of itself (tools.conversation's Models,
History and IdleJobs), over its narrow parts: run control (the active LLM), the Model, the
sink, the view and the metrics. It holds no session: each part is handed in.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from agent_server.agent.active_llm import profile_info
from agent_server.agent.condenser import render
from agent_server.agent.contract import RunControl
from agent_server.agent.llm import LLMFailure
from agent_server.agent.model import Model
from agent_server.agent.sink import EventSink
from agent_server.agent.usage import Metrics
from agent_server.agent.view import View
from events import ConversationStateUpdateEvent
from tools.conversation import Answer, IdleJob, ProfileInfo

logger = logging.getLogger(__name__)


class SessionSeams:
    def __init__(
        self,
        conversation_id: str,
        control: RunControl,
        model: Model,
        sink: EventSink,
        metrics: Metrics,
        view: Callable[[], View | None],
        follow_llm: Callable[[], Awaitable[None]],
    ) -> None:
        self.conversation_id = conversation_id
        self.control, self.model, self.sink, self.metrics = control, model, sink, metrics
        #: The view, when a run has attached it (tools read it between steps).
        self._view = view
        #: What the session does after a switch (the new model's vision decides what it sees).
        self._follow_llm = follow_llm
        self._idle: dict[str, IdleJob] = {}
        self._idle_task: asyncio.Task[None] | None = None

    # -- Models ----------------------------------------------------------------------------

    def profiles(self) -> list[ProfileInfo]:
        return self.control.llm.saved()

    async def supports_vision(self, profile_name: str) -> bool:
        return await self.model.supports_vision(self.control.llm.profile_config(profile_name))

    async def switch(self, profile_name: str, reason: str) -> ProfileInfo:
        active = self.control.llm
        event = await active.switch_profile(profile_name, reason, "agent")
        await self.sink.append(event)
        await self._follow_llm()
        return profile_info(profile_name, active.config)

    async def ask(self, profile_name: str | None, messages: list[dict[str, Any]]) -> Answer:
        active = self.control.llm
        config = active.config if profile_name is None else active.profile_config(profile_name)
        try:
            reply = await self.model.complete(config, messages, tools=[])
        except LLMFailure as failure:
            raise RuntimeError(
                f"{failure.code}: {self.sink.masker.text(failure.detail)[:500]}"
            ) from None
        self.metrics.add(reply.usage, reply.cost, reply.latency)
        return Answer(text=reply.content, model=config.model, base_url=config.base_url)

    # -- History ---------------------------------------------------------------------------

    def transcript(self, max_chars: int) -> str:
        view = self._view()
        text = render(view.request()[1:]) if view is not None else ""  # not the system prompt
        if len(text) > max_chars:
            half = max_chars // 2
            text = f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"
        return self.sink.masker.text(text)

    def user_images(self) -> list[str]:
        view = self._view()
        return list(view.user_images) if view is not None else []

    # -- IdleJobs --------------------------------------------------------------------------

    def when_idle(self, name: str, job: IdleJob) -> bool:
        if name in self._idle:
            return False
        self._idle[name] = job
        return True

    def run_started(self) -> None:
        """A run begins: the conversation is no longer idle; unfinished jobs wait again."""
        if self._idle_task is not None and not self._idle_task.done():
            self._idle_task.cancel()
        self._idle_task = None

    def run_ended(self) -> None:
        if self._idle:
            self._idle_task = asyncio.create_task(
                self._run_idle(), name=f"idle {self.conversation_id}"
            )

    async def close(self) -> None:
        task, self._idle_task = self._idle_task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run_idle(self) -> None:
        for name, job in list(self._idle.items()):
            try:
                detail, status = await job(), "done"
            except asyncio.CancelledError:
                raise  # the job stays waiting for the next idle moment
            except Exception as exc:
                logger.info("idle job %s of %s failed: %s", name, self.conversation_id, exc)
                detail, status = f"{type(exc).__name__}: {exc}", "failed"
            self._idle.pop(name, None)
            try:
                shown = self.sink.masker.text(detail)[:2000]
                await self.sink.append(
                    ConversationStateUpdateEvent(
                        key=name, value={"status": status, "detail": shown}
                    )
                )
            except Exception:  # the conversation was closed meanwhile
                logger.info("could not record idle job %s of %s", name, self.conversation_id)
