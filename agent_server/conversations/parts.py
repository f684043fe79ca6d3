"""ConversationParts: what a Conversation is made of, and `build_parts`, which wires them.

The catalogue makes conversations (new, forked, or loaded at start-up) and builds each one's
parts here from its record and directory, so a Conversation is handed finished parts and does
no factory work of its own. The parts refer to one another, never to the conversation: the
agent session writes through the log file, clients are shown what the log file holds, and a
switch of the model is kept in the record through the record's file.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from agent_server.agent.active_llm import ActiveLLM
from agent_server.agent.contract import ConversationSpec, RunControl, Session, SessionFactory
from agent_server.agent.sink import EventSink
from agent_server.conversations.cloning import RepositoryClone
from agent_server.conversations.fanout import Fanout
from agent_server.conversations.files import LogFile, MetaFile
from agent_server.conversations.presentation import Presentation
from agent_server.conversations.secrets import Secrets
from agent_server.record import StoredConversation
from agent_server.settings import Settings
from agent_server.telemetry import Telemetry
from agent_server.telemetry.tracing import ConversationTrace


@dataclass(frozen=True)
class ConversationParts:
    """One conversation's parts, built together by `build_parts`."""

    #: The settings as they are now (secrets, LLM profiles, the commit author).
    settings: Callable[[], Settings]
    telemetry: Telemetry
    #: Set once the conversation is closed (deleted or the server stopped): sockets and the
    #: webhook pusher wait on it instead of polling, and its files stop with it.
    closed: asyncio.Event
    meta: MetaFile
    log: LogFile
    #: What it keeps out of sight: the secret values tools and hooks read, and the masker
    #: that hides them and the keys in every event.
    secrets: Secrets
    #: What clients are shown of it (its info, its state updates).
    shown: Presentation
    #: Where its spans hang (a new conversation's root span starts in `start_trace`; one
    #: loaded from disk continues the trace its record names).
    trace: ConversationTrace
    #: What the user steers while the agent works (the policy, the model, a pause).
    control: RunControl
    #: The agent session that runs it: our own agent, or an ACP agent.
    session: Session
    repository_clone: RepositoryClone


def build_parts(
    record: StoredConversation,
    directory: Path,
    *,
    settings: Callable[[], Settings],
    make_session: SessionFactory,
    fanout: Fanout,
    telemetry: Telemetry,
    hidden: Mapping[str, str] | None = None,
) -> ConversationParts:
    """The parts of the conversation `record` keeps in `directory`; `hidden` (the server's own
    keys) is masked in its events with its secrets."""
    conversation_id = str(record.id)
    repository_clone = RepositoryClone()
    closed = asyncio.Event()
    secrets = Secrets(hidden)
    secrets.refresh(settings(), record)
    meta = MetaFile(record, directory, closed)
    log = LogFile(
        record, directory, masker=secrets.masker, fanout=fanout, telemetry=telemetry, closed=closed
    )
    shown = Presentation(record, directory, fanout, secrets.masker, lambda: log.current)
    trace = telemetry.tracing.resumed(record.trace, conversation_id)

    async def llm_changed() -> None:
        """A switch of the model (by the agent or the user) is kept in the record, and the
        keys it brings are masked from then on."""
        record.agent.llm = control.llm.stored
        record.llm_profile = control.llm.profile
        secrets.refresh(settings(), record)
        await meta.save()

    llm = ActiveLLM(
        record.agent.llm,
        record.llm_profile,
        lambda: settings().llm_profiles,
        on_change=llm_changed,
    )
    control = RunControl(confirmation_policy=record.confirmation_policy, llm=llm)
    session = make_session(
        ConversationSpec(
            id=conversation_id,
            working_dir=Path(record.workspace.working_dir),
            state_dir=directory,
            agent=record.agent,
            max_iterations=record.max_iterations,
            stuck_detection=record.stuck_detection,
            hook_config=record.hook_config,
            git_author=settings().git_author(),
        ),
        EventSink(
            log.get, lambda event: fanout.publish_transient(conversation_id, event), secrets.masker
        ),
        control,
        secrets.values,
        record.metrics,
    )
    return ConversationParts(
        settings=settings,
        telemetry=telemetry,
        closed=closed,
        meta=meta,
        log=log,
        secrets=secrets,
        shown=shown,
        trace=trace,
        control=control,
        session=session,
        repository_clone=repository_clone,
    )
