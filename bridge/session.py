"""Session: one ACP session, which is one conversation of the service.

A follower task reads the conversation's events (Service.follow) and turns each into session
updates for the editor (Translator). A prompt is a turn: the user's message is sent with
`run`, and the turn lasts until the first execution status after that message at which the
run rests:

    waiting_for_confirmation   each action waiting is a permission request to the editor;
                               the answer goes back (respond_to_confirmation) and the turn
                               goes on (accepted) or rests `idle` (rejected)
    finished, stuck, error     end_turn (an error is in the transcript as the agent's message)
    paused                     cancelled (session/cancel interrupts the run)
    idle                       end_turn, or cancelled after a cancel

A cancel that the service does not settle within CANCEL_GRACE ends the turn anyway. A stream
that cannot be resumed (Service.follow gives up) fails the turn in flight with the service's
error; the next prompt opens it again from where it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import acp
from acp.helpers import update_current_mode
from acp.schema import PermissionOption, StopReason, ToolCallUpdate

from bridge import content, modes
from bridge.content import Block
from bridge.editor import Editor
from bridge.errors import BridgeError, Invalid
from bridge.schema import (
    RESTING,
    ConversationStateUpdateEvent,
    Event,
    HookExecutionEvent,
    MessageEvent,
)
from bridge.service import Conversation, Cursor, Service
from bridge.toolcalls import Call
from bridge.updates import Translator, thought

logger = logging.getLogger(__name__)

#: Seconds a cancelled turn waits for the run to come to rest before it ends anyway.
CANCEL_GRACE = 10.0
#: Statuses a turn may have waiting (a handful per turn; the prompt reads them at once).
MAX_STATUSES = 256
BLOCKED = "blocked"
ALLOW, ALLOW_ALWAYS, REJECT = "allow", "allow-always", "reject"
OPTIONS = [
    PermissionOption(option_id=ALLOW, name="Allow", kind="allow_once"),
    PermissionOption(
        option_id=ALLOW_ALWAYS, name="Always allow in this session", kind="allow_always"
    ),
    PermissionOption(option_id=REJECT, name="Reject", kind="reject_once"),
]


def _status(event: Event) -> str | None:
    """The execution status the event sets, if it sets one."""
    if isinstance(event, ConversationStateUpdateEvent) and event.key == "execution_status":
        return str(event.value)
    return None


class Turn:
    """One prompt in flight: the statuses after its message, and how it may end early."""

    def __init__(self) -> None:
        self.statuses: asyncio.Queue[str | BridgeError] = asyncio.Queue(MAX_STATUSES)
        #: The prompt's own user message has come back in the stream.
        self.message_seen = False
        self.cancelled = False

    def put(self, item: str | BridgeError) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.statuses.put_nowait(item)

    async def next(self) -> str | None:
        """The next status (None: a cancel was not settled in time); raises a stream failure."""
        try:
            if self.cancelled:
                item = await asyncio.wait_for(self.statuses.get(), CANCEL_GRACE)
            else:
                item = await self.statuses.get()
        except TimeoutError:
            return None
        if isinstance(item, BridgeError):
            raise item
        return item


class Session:
    def __init__(
        self, conversation: Conversation, service: Service, editor: Editor, cwd: str, mode: str
    ) -> None:
        self.id = conversation.id
        self.keys = conversation.keys
        self.service = service
        self.editor = editor
        self.mode = mode
        self.translator = Translator(
            cwd, conversation.working_dir, editor.can_write, modes.asks(mode)
        )
        self.cursor = Cursor()
        self.turn: Turn | None = None
        self._follower: asyncio.Task[None] | None = None

    # -- the stream ------------------------------------------------------------------------

    async def open(self, replay: bool) -> None:
        """Read the stored events (sent to the editor when `replay`: a loaded session shows
        its history), then follow the new ones."""
        async for event in self.service.history(self.id):
            if event.id:
                self.cursor.after = event.id
            updates, _ = self.translator.translate(event, show_user=True)
            if replay:  # never written back: the editor's files are newer than the history
                for update in updates:
                    await self.editor.update(self.id, update)
        self.follow()

    @property
    def following(self) -> bool:
        return self._follower is not None and not self._follower.done()

    def follow(self) -> None:
        """Start the follower unless it runs (after a failure it goes on from the cursor)."""
        if self._follower is None or self._follower.done():
            self._follower = asyncio.create_task(self._follow(), name=f"follow {self.id}")

    async def _follow(self) -> None:
        try:
            async for event in self.service.follow(self.id, self.cursor):
                await self._on_event(event)
        except BridgeError as exc:
            logger.warning("the events of %s stopped: %s", self.id, exc.message)
            if self.turn is not None:
                self.turn.put(exc)
        except Exception:
            logger.exception("the events of %s stopped", self.id)
            if self.turn is not None:
                self.turn.put(BridgeError("the bridge lost the conversation's events"))

    async def _on_event(self, event: Event) -> None:
        turn = self.turn
        show_user = False
        if isinstance(event, MessageEvent) and event.source == "user":
            if turn is not None and not turn.message_seen:
                turn.message_seen = True  # the prompt's own: the editor shows it already
            else:
                show_user = True  # written elsewhere (the web console, another client)
        updates, writes = self.translator.translate(event, show_user=show_user)
        for update in updates:
            await self.editor.update(self.id, update)
        for write in writes:
            failure = await self.editor.write(self.id, write)
            if failure is not None:
                await self.editor.update(
                    self.id, thought(f"(the editor did not take the new {write.path}: {failure})\n")
                )
        status = _status(event)
        if turn is None or not turn.message_seen:
            return
        if status is not None:
            turn.put(status)
        elif (
            isinstance(event, HookExecutionEvent)
            and event.blocked
            and event.hook_event_type == "UserPromptSubmit"
        ):
            turn.put(BLOCKED)

    # -- a turn ----------------------------------------------------------------------------

    async def prompt(self, blocks: list[Block]) -> StopReason:
        if self.turn is not None:
            raise Invalid("this session is already running a prompt")
        turn = self.turn = Turn()
        try:
            self.follow()
            await self.service.send(self.id, content.convert(blocks, self.service.images))
            return await self._wait(turn)
        finally:
            self.turn = None

    async def _wait(self, turn: Turn) -> StopReason:
        while True:
            status = await turn.next()
            if status is None:  # cancelled, and the service did not settle in time
                return "cancelled"
            if status == BLOCKED:
                return "refusal"
            if status not in RESTING:
                continue
            if status == "waiting_for_confirmation":
                accept = False if turn.cancelled else await self._confirm()
                await self._respond(accept, turn)
                continue
            if turn.cancelled or status == "paused":
                return "cancelled"
            return "end_turn"

    async def _respond(self, accept: bool, turn: Turn) -> None:
        reason = "Cancelled by the user" if turn.cancelled else "Rejected by the user"
        try:
            await self.service.respond(self.id, accept, reason)
        except Invalid as exc:  # nothing waits any more (answered elsewhere): go on
            logger.info(
                "the answer to the confirmation of %s was refused: %s", self.id, exc.message
            )

    async def _confirm(self) -> bool:
        """Ask the editor about each action waiting; the first refusal rejects them all (the
        service takes one answer for all of them)."""
        pending = self.translator.pending() or [
            Call(f"confirm-{self.id}", "Run the actions the agent proposed", "other")
        ]
        for call in pending:
            answer = await self.editor.ask(
                self.id,
                ToolCallUpdate(
                    tool_call_id=call.tool_call_id,
                    title=call.title,
                    kind=call.kind,
                    status="pending",
                ),
                OPTIONS,
            )
            outcome = answer.outcome
            if outcome.outcome != "selected" or outcome.option_id not in (ALLOW, ALLOW_ALWAYS):
                return False
            if outcome.option_id == ALLOW_ALWAYS:
                await self.set_mode("always-approve")
                break
        for call in pending:
            await self.editor.update(
                self.id, acp.update_tool_call(call.tool_call_id, status="in_progress")
            )
        return True

    async def cancel(self) -> None:
        turn = self.turn
        if turn is None or turn.cancelled:
            return
        turn.cancelled = True
        try:
            await self.service.interrupt(self.id)
        except BridgeError as exc:
            logger.warning("interrupting %s failed: %s", self.id, exc.message)
        turn.put("running")  # wakes the turn, which now waits at most CANCEL_GRACE

    async def set_mode(self, mode: str) -> None:
        await self.service.set_policy(self.id, modes.policy(mode))
        self.mode = mode
        self.translator.asking = modes.asks(mode)
        await self.editor.update(self.id, update_current_mode(mode))

    async def close(self) -> None:
        follower, self._follower = self._follower, None
        if follower is not None:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)


__all__ = ["CANCEL_GRACE", "Session", "Turn"]
