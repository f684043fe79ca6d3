"""What clients are shown of one conversation, in one place: its ConversationInfo (what the
routes answer, and what a `full_state` frame holds) and the state updates that tell live
subscribers of a change.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from agent_server.conversations.fanout import Fanout
from agent_server.log import EventLog
from agent_server.record import ConversationInfo, StoredConversation
from core.ids import new_event_id
from core.masking import Masker
from events import ConversationStateUpdateEvent, format_timestamp
from events.status import ExecutionStatus


def _now() -> str:
    return format_timestamp(datetime.now(UTC))


class Presentation:
    def __init__(
        self,
        record: StoredConversation,
        directory: Path,
        fanout: Fanout,
        masker: Masker,
        log: Callable[[], EventLog | None],
    ) -> None:
        self.record, self.directory, self.masker = record, directory, masker
        self._fanout = fanout
        #: The conversation's log, when it is open (None until something needed it).
        self._log = log
        #: The status clients still see while moves' events are being written (None: the
        #: record's), and how many are: a client that reads a status finds its event.
        self._held: ExecutionStatus | None = None
        self._moving = 0

    @property
    def status(self) -> ExecutionStatus:
        """The execution status clients are shown."""
        return self.record.execution_status if self._held is None else self._held

    @contextlib.contextmanager
    def holding(self, before: ExecutionStatus) -> Iterator[None]:
        """Show `before` until the block (writing the move's event) ends."""
        if self._moving == 0:
            self._held = before
        self._moving += 1
        try:
            yield
        finally:
            self._moving -= 1
            if self._moving == 0:
                self._held = None

    @property
    def _id(self) -> str:
        return str(self.record.id)

    def info(self) -> ConversationInfo:
        """The conversation as the API shows it. The tree's fields (HEAD, the last user
        message) come from the log, so they are given only while it is open."""
        log, leaf, last_user = self._log(), None, None
        if log is not None:
            leaf = log.head
            last_user = log.last_on_branch(leaf, "MessageEvent", "user")
        elif self.record.head_set_at is not None:
            leaf = self.record.head_event_id
        return ConversationInfo.of(
            self.record,
            directory=str(self.directory),
            webhook=self._fanout.status(self._id),
            leaf=leaf,
            head_is_empty=leaf is None and log is not None and len(log) > 0,
            last_user_message=last_user,
            status=self.status,
        )

    def state_event(self) -> ConversationStateUpdateEvent:
        """The whole state as one `full_state` update (masked)."""
        return ConversationStateUpdateEvent(
            id=new_event_id(),
            timestamp=_now(),
            key="full_state",
            value=self.masker.data(self.info().model_dump(mode="json", exclude_none=True)),
        )

    def publish_state(self) -> None:
        """A `full_state` ConversationStateUpdateEvent to the live subscribers (not stored):
        what the OpenHands SDK client waits for when a run ends."""
        self._fanout.publish_transient(self._id, self.state_event())

    def publish_if_settled(self, running: bool) -> None:
        """Shown again on the sockets while no run goes (`running`: the run task's), for a
        client that asked for the conversation. The OpenHands SDK takes a run's end only from
        a `full_state` that comes after its POST /run answered, and a short run on a loaded
        machine ends before that: its snapshot went unseen, and the SDK waited out its 30 s
        fallback, asking for the conversation each second meanwhile."""
        if not running and self.status != ExecutionStatus.RUNNING:
            self.publish_state()

    async def announce(self, *fields: str) -> None:
        """Publish a change a client asked for, and answer it only once the sockets carry it:
        the OpenHands SDK reads its state from what the socket brought. With `fields`, one
        small update per field (the client takes them quicker), else the full state."""
        if fields:
            value = self.masker.data(self.info().model_dump(mode="json", include=set(fields)))
            for name in fields:
                self._fanout.publish_transient(
                    self._id,
                    ConversationStateUpdateEvent(
                        id=new_event_id(), timestamp=_now(), key=name, value=value.get(name)
                    ),
                )
        else:
            self.publish_state()
        await self._fanout.delivered(self._id)
